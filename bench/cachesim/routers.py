"""Baseline engine choices for a simulated fleet, against the gateway's `choose_engine`.

- `round-robin`: engine i, i+1, ... whatever it holds, so every engine sees every adapter.
- `residency-first`: llm-d's LoRA affinity as the issue states it: among the engines where the
  version is resident (GPU slot or engine cache), the least loaded; if none, the least loaded.
`portal` is not here: the simulator calls workers.cache_policy.choose_engine itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.cachesim.engine import EngineModel

# (engine, requests running or queued on it, requests it serves at once)
EngineView = tuple[EngineModel, int, int]


class Router:
    name = "portal"

    def choose(self, version: str, engines: Sequence[EngineView]) -> int:
        raise NotImplementedError


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self) -> None:
        self.next = 0

    def choose(self, version: str, engines: Sequence[EngineView]) -> int:
        i = self.next % len(engines)
        self.next += 1
        return i


class ResidencyFirst(Router):
    name = "residency-first"

    def choose(self, version: str, engines: Sequence[EngineView]) -> int:
        def load(i: int) -> tuple[float, int]:
            _, in_flight, capacity = engines[i]
            return in_flight / max(1, capacity), i

        resident = [i for i, (m, _, _) in enumerate(engines) if version in m.cpu]
        return min(resident or range(len(engines)), key=load)


ROUTERS = {"portal": Router, "round-robin": RoundRobin, "residency-first": ResidencyFirst}


def make_router(name: str) -> Router:
    try:
        return ROUTERS[name]()
    except KeyError:
        raise ValueError(f"unknown router {name!r}; one of {', '.join(ROUTERS)}") from None
