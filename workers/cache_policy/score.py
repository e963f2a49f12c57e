"""The seed's eviction score: which resident version is worth the least to keep.

The score is log-linear, i.e. a product of factors: predicted demand (share of the coming
requests) x recent hits x reload cost x tenant priority, divided by idle time and memory size, each
raised to its weight. With demand and
load cost at weight 1 it is the expected cost of a miss (share x reload time), the quantity a cache
counted in slots (as vLLM's are) should keep high. Weights are settings; these defaults are the ones
the cache simulator measured (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workers.cache_policy.demand import DemandTracker
from workers.cache_policy.snapshot import Resident, SloClass, VersionInfo

_SHARE_FLOOR = 1e-9  # keeps log() finite for versions never seen


def _default_slo_priority() -> dict[SloClass, float]:
    return {"gold": 1.0, "silver": 0.5, "bronze": 0.0}


@dataclass(frozen=True)
class ScoreWeights:
    demand: float = 1.0  # predicted share of the near-future requests
    hits: float = 0.0  # recent (short half-life) hit count
    idle: float = 0.0  # seconds since last use, counts against keeping
    load_cost: float = 0.5  # time to load it again, counts for keeping
    size: float = 0.0  # memory size, counts against keeping
    priority: float = 0.5  # tenant SLO class
    slo_priority: dict[SloClass, float] = field(default_factory=_default_slo_priority)


def keep_value(
    info: VersionInfo,
    resident: Resident | None,
    demand: DemandTracker,
    now: float,
    weights: ScoreWeights,
) -> float:
    """Higher is more worth keeping; a version not resident is scored as if just used."""
    share, hits = demand.share_and_hits(info.name)
    idle = max(0.0, now - resident.last_used) if resident is not None else 0.0
    return value_of(info, share=share, recent_hits=hits, idle_s=idle, weights=weights)


def value_of(
    info: VersionInfo, *, share: float, recent_hits: float, idle_s: float, weights: ScoreWeights
) -> float:
    """keep_value from its inputs; terms with weight 0 cost nothing."""
    w = weights
    value = w.demand * math.log(share + _SHARE_FLOOR) + w.priority * w.slo_priority.get(
        info.slo, 0.0
    )
    if w.hits:
        value += w.hits * math.log1p(recent_hits)
    if w.idle:
        value -= w.idle * math.log1p(idle_s)
    if w.load_cost:
        value += w.load_cost * math.log(max(info.load_cost_s, 1e-6))
    if w.size:
        value -= w.size * math.log(max(info.size_bytes, 1))
    return value


def eviction_score(
    info: VersionInfo,
    resident: Resident | None,
    demand: DemandTracker,
    now: float,
    weights: ScoreWeights,
) -> float:
    """Higher is evicted first."""
    return -keep_value(info, resident, demand, now, weights)
