"""The state of one engine as the cache policy sees it: what is resident where, and its limits.

Built by the cache controller from the engine plugin's residency report (and by the simulator from
its engine model); the policy only reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

SloClass = Literal["gold", "silver", "bronze"]
Tier = Literal["gpu", "cpu"]


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """What the registry knows about one adapter version (served name)."""

    name: str
    tenant: str
    slo: SloClass
    rank: int
    size_bytes: int
    load_cost_s: float  # estimated time to bring it from the node's disk into the engine cache


@dataclass(frozen=True, slots=True)
class Resident:
    """One version in the engine's CPU cache; tier "gpu" means it also holds a GPU slot."""

    name: str
    tier: Tier
    pinned: bool = False
    in_flight: int = 0
    loaded_at: float = 0.0  # when it entered the engine cache (minimum residency counts from here)
    last_used: float = 0.0


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """One engine at one instant. `versions` must describe every resident and the incoming one."""

    engine: str
    now: float
    gpu_slots: int  # vLLM --max-loras
    cpu_slots: int  # vLLM --max-cpu-loras (the engine's LRU cache, GPU slots included)
    max_lora_rank: int
    resident: Mapping[str, Resident]
    versions: Mapping[str, VersionInfo]
    # Pins a tenant may hold on this engine; a tenant missing here may pin nothing (fail closed).
    tenant_pin_quota: Mapping[str, int] = field(default_factory=dict)
    pinned_rank_budget: int | None = None  # the sum of ranks of pinned versions; None: no budget
    busy_peak: int = 0  # the most GPU slots serving requests at once lately (pins leave them free)
    # Versions with requests sent to this engine that are not in its cache yet: each takes a
    # cache slot when vLLM admits its request (and evicts by its own LRU if none is free).
    arriving: frozenset[str] = frozenset()

    def on_gpu(self) -> list[str]:
        return [n for n, r in self.resident.items() if r.tier == "gpu"]

    def pinned(self) -> list[str]:
        return [n for n, r in self.resident.items() if r.pinned]

    def pins_of(self, tenant: str) -> int:
        return sum(1 for n in self.pinned() if self.versions[n].tenant == tenant)

    def pinned_rank(self) -> int:
        return sum(self.versions[n].rank for n in self.pinned())
