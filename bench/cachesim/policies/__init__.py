"""The policies the simulator compares, by name."""

from __future__ import annotations

from collections.abc import Callable

from bench.cachesim.policies.base import Controller, SimContext
from bench.cachesim.policies.belady import Belady
from bench.cachesim.policies.classic import A0, GDSF, LFU, Chameleon
from bench.cachesim.policies.portal import Portal, PortalNoSlo

POLICIES: dict[str, Callable[[], Controller]] = {
    "lru": Controller,
    "lfu": LFU,
    "gdsf": GDSF,
    "chameleon": Chameleon,
    "portal": Portal,
    "portal-noslo": PortalNoSlo,  # portal without its SLO protections, for comparison
    "belady": Belady,
    "a0": A0,  # reference only: reads the whole trace's popularity
}


def make_policy(name: str) -> Controller:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; one of {', '.join(POLICIES)}") from None


__all__ = ["POLICIES", "Controller", "SimContext", "make_policy"]
