"""Protection for gold versions steered by what LRU would have done, not a residency in seconds.

A fixed bonus or minimum residency means different things at different request rates and class
mixes: too little when gold is the long tail, a tax on everyone when gold is a third of the
traffic. So the protection is a boost on gold versions' value in the eviction score (a
multiplier on their predicted share), stepped by a governor against a reference measured on the
same requests:

- The reference is vLLM's own LRU: a shadow LRU cache as large as the pool's engine caches
  together, fed every request the policy sees, counts each class's misses. Being the same
  requests, the comparison is paired: most of the traffic's own noise cancels, which a model
  of LRU from the predicted shares (Che's approximation, used before) left in.
- What is measured is each class's cold loads (requests that started a load; those that only
  waited on it share its load), decayed, against the shadow's misses of the same class.
- Each tick moves the log-boost in proportion to the relative error (`FairnessGovernor.error`):
  down by how far another class is beyond `others_slack`, else up by how far gold is above
  `(1 - gold_cut)` of its reference, never by more than the others' headroom. A fixed step
  each tick swung between the extremes instead (1 to 40 and back over a 5,000-request run):
  the cache answers a new boost only as gold versions are next asked for, hundreds of
  requests later, so the measurements lag behind whatever the boost just did.
- It starts at 2, not 1: the score ranks a rarely asked version by its small predicted share,
  so a long-tail gold class starts out below LRU, and from 1 the first few hundred requests
  are lost to catching up (4% of gold's cold loads on the gold-least-popular run). Where gold
  needs no help the others' check takes the boost back down.

The result is a log-boost per class for ScoreWeights.slo_priority (with priority weight 1).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import replace

from workers.cache_policy.planner import PolicyParams
from workers.cache_policy.snapshot import SloClass


def slo_priority(boost: float) -> dict[SloClass, float]:
    """ScoreWeights.slo_priority for a gold boost (the score adds priority x log-boost)."""
    return {"gold": math.log(boost), "silver": 0.0, "bronze": 0.0}


class ShadowLru:
    """vLLM's LRU engine cache of `slots` entries, kept only to count its misses."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._cache: OrderedDict[str, None] = OrderedDict()

    def resize(self, slots: int) -> None:
        self.slots = slots
        while len(self._cache) > slots:
            self._cache.popitem(last=False)

    def miss(self, version: str) -> bool:
        """One request for `version`: True if LRU would have had to load it."""
        if version in self._cache:
            self._cache.move_to_end(version)
            return False
        self._cache[version] = None
        if len(self._cache) > self.slots:
            self._cache.popitem(last=False)
        return True


class FairnessGovernor:
    """Steers the gold boost from each class's cold loads against LRU's on the same requests."""

    def __init__(
        self,
        slots: int,
        *,
        # The goal asks 0.25. Aiming further pays where it can: gold's own requests are few,
        # so its p99 TTFT is one of its cold requests, and a 0.30 target left gold's p99 9%
        # above LRU's on bench-cache's skewed-2x run (0.50: 9% below); the others' slack still
        # bounds what it costs them.
        gold_cut: float = 0.50,
        others_slack: float = 0.03,  # the goal allows 0.05: 0.02 kept for noise
        half_life: float = 300.0,  # requests
        gain: float = 0.3,  # log-boost per tick per unit of relative error
        max_step: float = 1.25,  # per tick, either way
        initial: float = 2.0,
        max_boost: float = 50.0,
    ) -> None:
        self.slots = slots
        self.gold_cut = gold_cut
        self.others_slack = others_slack
        self.gain = gain
        self.max_log_step = math.log(max_step)
        self.max_boost = max_boost
        self.boost = initial
        self._decay = math.exp(-math.log(2) / half_life)
        self._lru = ShadowLru(slots)
        self._requests: dict[str, float] = {}
        self._loads: dict[str, float] = {}
        self._lru_loads: dict[str, float] = {}

    def resize(self, slots: int) -> None:
        """The pool's cache size changed (an engine came or went): so does the reference's."""
        self.slots = slots
        self._lru.resize(slots)

    def observe(self, version: str, slo: str, started_load: bool) -> None:
        """One request for `version` of class `slo`, and whether it started a cold load.
        Requests that only wait on a load already under way are not counted: the reference counts
        loads, and under overload a queue of them would read as a class missing far above it."""
        for counts in (self._requests, self._loads, self._lru_loads):
            for c in counts:
                counts[c] *= self._decay
        self._requests[slo] = self._requests.get(slo, 0.0) + 1.0
        self._loads[slo] = self._loads.get(slo, 0.0) + (1.0 if started_load else 0.0)
        lru = 1.0 if self._lru.miss(version) else 0.0
        self._lru_loads[slo] = self._lru_loads.get(slo, 0.0) + lru

    def measured(self, slo: str) -> tuple[float, float] | None:
        """(cold loads, LRU's) of a class, decayed; None while too few requests to judge."""
        if self._requests.get(slo, 0.0) < 20.0:
            return None
        return self._loads.get(slo, 0.0), self._lru_loads.get(slo, 0.0)

    def error(self) -> float:
        """How far to move the log-boost, relative: < 0 when another class pays beyond its slack
        (by how much), > 0 when gold misses above its target (by how much, but no more than the
        others' headroom, so the boost slows down as they near their limit), else 0."""
        gold = self.measured("gold")
        others = [m for c in self._requests if c != "gold" and (m := self.measured(c))]
        # Relative to at least one load: a class LRU barely misses cannot swing the boost.
        over = max(
            (loads / max((1.0 + self.others_slack) * lru, 1.0) - 1.0 for loads, lru in others),
            default=-1.0,
        )
        if over > 0.0:
            return -over
        if gold is None:
            return 0.0
        target = (1.0 - self.gold_cut) * gold[1]
        if gold[0] <= target:
            return 0.0
        return min(gold[0] / max(target, 1.0) - 1.0, -over)

    def tick(self) -> float:
        """One step of the boost towards the targets; returns it."""
        step = max(-self.max_log_step, min(self.max_log_step, self.gain * self.error()))
        self.boost = min(self.max_boost, max(1.0, self.boost * math.exp(step)))
        return self.boost


def protected_params(params: PolicyParams, boost: float) -> PolicyParams:
    """The policy's parameters with gold protection derived from `boost` (FairnessGovernor):
    priority through the score, no fixed minimum residency in seconds. The simulator's `portal`
    and the fleet's controller both plan with this."""
    return replace(
        params,
        rules=replace(params.rules, gold_min_residency_s=0.0),
        weights=replace(params.weights, priority=1.0, slo_priority=slo_priority(boost)),
    )
