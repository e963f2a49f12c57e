"""Protection for gold versions sized from demand and the other classes' budget, not in seconds.

A fixed bonus or minimum residency means different things at different request rates and class
mixes: too little when gold is the long tail, a tax on everyone when gold is a third of the
traffic. So the boost is chosen from the predicted shares themselves:

- The reference is what vLLM's own LRU would give each class, from Che's approximation (an
  LRU cache of C entries under independent requests keeps a version of share p with probability
  1 - exp(-p T), where T solves sum_v (1 - exp(-p_v T)) = C).
- A candidate boost m multiplies gold versions' shares in the ranking; the cache then holds the
  C versions of highest boosted share, and each class misses the shares it does not hold.
- `gold_boost` (a model only): the smallest m that cuts gold's predicted misses by `gold_cut`
  against the reference while no other class misses more than `others_slack` above it; if none
  does both, the largest m that keeps the others within it ("costs nobody" wins).
- `FairnessGovernor` (what the policy uses): the ranked model misjudges a real cache (churn,
  learning), so the boost is steered by what is measured instead: each class's decayed miss
  ratio against its LRU reference. Gold above its target and the others within theirs: raise the
  boost; any other class beyond its reference by `others_slack`: lower it. A step per tick.

The result is a log-boost per class for ScoreWeights.slo_priority (with priority weight 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from workers.cache_policy.demand import DemandTracker
from workers.cache_policy.planner import PolicyParams
from workers.cache_policy.snapshot import SloClass

CANDIDATE_BOOSTS: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0)


def lru_misses(
    shares: Mapping[str, float], slo_of: Mapping[str, str], slots: int
) -> dict[str, float]:
    """Each class's predicted miss share under LRU with `slots` entries (Che's approximation)."""
    ps = [p for p in shares.values() if p > 0]
    out: dict[str, float] = {slo_of[v]: 0.0 for v in shares}
    if len(ps) <= slots:
        return out
    lo, hi = 0.0, 1.0
    while sum(1 - math.exp(-p * hi) for p in ps) < slots:
        hi *= 2.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if sum(1 - math.exp(-p * mid) for p in ps) < slots:
            lo = mid
        else:
            hi = mid
    for v, p in shares.items():
        out[slo_of[v]] += p * math.exp(-p * hi)
    return out


def ranked_misses(
    shares: Mapping[str, float], slo_of: Mapping[str, str], slots: int, boost: float
) -> dict[str, float]:
    """Each class's miss share when the cache holds the `slots` highest boosted shares."""
    order = sorted(shares, key=lambda v: (-shares[v] * (boost if slo_of[v] == "gold" else 1.0), v))
    out: dict[str, float] = {slo_of[v]: 0.0 for v in shares}
    for v in order[slots:]:
        out[slo_of[v]] += shares[v]
    return out


def gold_boost(
    shares: Mapping[str, float],
    slo_of: Mapping[str, str],
    slots: int,
    *,
    gold_cut: float = 0.35,  # the goal is 0.25; the ranked model is kinder than a real run
    others_slack: float = 0.05,
    candidates: Sequence[float] = CANDIDATE_BOOSTS,
) -> float:
    """The multiplier on gold versions' predicted shares (1.0: no protection needed or possible)."""
    if not any(slo_of[v] == "gold" for v in shares):
        return 1.0
    ref = lru_misses(shares, slo_of, slots)
    if ref.get("gold", 0.0) <= 0.0:
        return 1.0
    best = 1.0
    for m in candidates:
        miss = ranked_misses(shares, slo_of, slots, m)
        if any(miss[c] > (1.0 + others_slack) * ref[c] for c in miss if c != "gold"):
            break  # larger boosts only take more from the others
        best = m
        if miss["gold"] <= (1.0 - gold_cut) * ref["gold"]:
            break
    return best


def slo_priority(boost: float) -> dict[SloClass, float]:
    """ScoreWeights.slo_priority for a gold boost (the score adds priority x log-boost)."""
    return {"gold": math.log(boost), "silver": 0.0, "bronze": 0.0}


class FairnessGovernor:
    """Steers the gold boost from measured miss ratios per class against the LRU reference."""

    def __init__(
        self,
        *,
        gold_cut: float = 0.30,  # the goal is 0.25: a margin for noise
        others_slack: float = 0.0,  # the goal allows 0.05: the same margin
        half_life: float = 2000.0,  # requests
        step: float = 1.25,
        max_boost: float = 50.0,
    ) -> None:
        self.gold_cut = gold_cut
        self.others_slack = others_slack
        self.step = step
        self.max_boost = max_boost
        self.boost = 1.0
        self._decay = math.exp(-math.log(2) / half_life)
        self._requests: dict[str, float] = {}
        self._misses: dict[str, float] = {}

    def observe(self, slo: str, missed: bool) -> None:
        """One request of class `slo`, and whether its version was out of the engine cache."""
        for counts in (self._requests, self._misses):
            for c in counts:
                counts[c] *= self._decay
        self._requests[slo] = self._requests.get(slo, 0.0) + 1.0
        self._misses[slo] = self._misses.get(slo, 0.0) + (1.0 if missed else 0.0)

    def update(self, shares: Mapping[str, float], slo_of: Mapping[str, str], slots: int) -> float:
        """One step of the boost towards the targets; returns it."""
        ref_miss = lru_misses(shares, slo_of, slots)
        ref_share: dict[str, float] = {}
        for v, p in shares.items():
            ref_share[slo_of[v]] = ref_share.get(slo_of[v], 0.0) + p

        def ratio(c: str) -> tuple[float, float] | None:
            n = self._requests.get(c, 0.0)
            if n < 20.0 or ref_share.get(c, 0.0) <= 0.0:
                return None  # too few requests to judge
            return self._misses.get(c, 0.0) / n, ref_miss.get(c, 0.0) / ref_share[c]

        gold = ratio("gold")
        others = [r for c in self._requests if c != "gold" and (r := ratio(c)) is not None]
        if any(measured > (1.0 + self.others_slack) * ref for measured, ref in others):
            self.boost = max(1.0, self.boost / self.step)
        elif gold is not None and gold[0] > (1.0 - self.gold_cut) * gold[1]:
            self.boost = min(self.max_boost, self.boost * self.step)
        return self.boost

    def tick(self, demand: DemandTracker, slo_of: Mapping[str, str], slots: int) -> float:
        """One tick: the boost stepped from the predicted shares of the versions in `slo_of`."""
        shares = {v: s for v, (s, _) in demand.shares_and_hits(slo_of).items() if s > 0}
        return self.update(shares, {v: slo_of[v] for v in shares}, slots)


def protected_params(params: PolicyParams, boost: float) -> PolicyParams:
    """The policy's parameters with gold protection derived from `boost` (FairnessGovernor):
    priority through the score, no fixed minimum residency in seconds. The simulator's `portal`
    and the fleet's controller both plan with this."""
    return replace(
        params,
        rules=replace(params.rules, gold_min_residency_s=0.0),
        weights=replace(params.weights, priority=1.0, slo_priority=slo_priority(boost)),
    )
