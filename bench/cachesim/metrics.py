"""What a simulation run counts: per request where its version was, every transfer, TTFT."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SLO_CLASSES = ("gold", "silver", "bronze")


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (a value that occurred), so small runs can be checked by hand."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[k - 1]


@dataclass
class ClassStats:
    requests: int = 0
    gpu_hits: int = 0  # its version held a GPU slot when the engine admitted it
    cpu_hits: int = 0  # in the engine cache, copied to a GPU slot for it
    cold_requests: int = 0  # not in the engine cache: it waited for a cold load
    cold_loads: int = 0  # transfers disk/object store -> engine cache, whoever caused them
    gpu_loads: int = 0  # transfers into a GPU slot (the GPU misses), whoever caused them
    bytes_loaded: int = 0  # bytes of the cold loads
    evictions: int = 0  # left the engine cache (vLLM's LRU or the controller's evict)
    ttft_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "gpu_hits": self.gpu_hits,
            "cpu_hits": self.cpu_hits,
            "cold_requests": self.cold_requests,
            "cold_loads": self.cold_loads,
            "gpu_loads": self.gpu_loads,
            "bytes_loaded": self.bytes_loaded,
            "evictions": self.evictions,
            "ttft_p50_ms": round(percentile(self.ttft_s, 50) * 1000, 3),
            "ttft_p99_ms": round(percentile(self.ttft_s, 99) * 1000, 3),
            "ttft_mean_ms": round(1000 * sum(self.ttft_s) / max(1, len(self.ttft_s)), 3),
        }


@dataclass
class Metrics:
    total: ClassStats = field(default_factory=ClassStats)
    by_slo: dict[str, ClassStats] = field(
        default_factory=lambda: {c: ClassStats() for c in SLO_CLASSES}
    )
    demotions: int = 0
    object_fetches: int = 0
    object_bytes: int = 0
    pins: int = 0
    unpins: int = 0
    warms: int = 0
    controller_loads: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    outcomes: list[str] = field(default_factory=list)  # per request in trace order: gpu/cpu/cold
    makespan_s: float = 0.0

    def _both(self, slo: str) -> tuple[ClassStats, ClassStats]:
        return self.total, self.by_slo.setdefault(slo, ClassStats())

    def request(self, index: int, slo: str, outcome: str, ttft_s: float) -> None:
        self.outcomes[index] = outcome
        for s in self._both(slo):
            s.requests += 1
            s.ttft_s.append(ttft_s)
            if outcome == "gpu":
                s.gpu_hits += 1
            elif outcome == "cpu":
                s.cpu_hits += 1
            else:
                s.cold_requests += 1

    def transfer(self, slo: str, cold: bool, moved: bool, size: int) -> None:
        for s in self._both(slo):
            s.cold_loads += cold
            s.bytes_loaded += size if cold else 0
            s.gpu_loads += moved

    def eviction(self, slo: str) -> None:
        for s in self._both(slo):
            s.evictions += 1

    def refuse(self, code: str) -> None:
        self.refused[code] = self.refused.get(code, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        out = self.total.to_dict()
        out.update(
            demotions=self.demotions,
            object_fetches=self.object_fetches,
            object_bytes=self.object_bytes,
            pins=self.pins,
            unpins=self.unpins,
            warms=self.warms,
            controller_loads=self.controller_loads,
            refused_actions=dict(sorted(self.refused.items())),
            makespan_s=round(self.makespan_s, 3),
            by_slo={c: s.to_dict() for c, s in self.by_slo.items() if s.requests or s.cold_loads},
        )
        return out
