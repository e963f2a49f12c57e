"""Plan one engine's cache actions: make room for a request's version, keep the hottest pinned.

`plan_actions` is the one entry point. Given a snapshot of an engine and the demand seen so far it
returns actions in the order to carry them out; applied in that order they keep every hard rule
(rules.check_plan verifies it). It never talks to an engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from workers.cache_policy.actions import Action, Evict, Load, Pin, Unpin, Warm
from workers.cache_policy.demand import DemandTracker
from workers.cache_policy.rules import HardRules, evictable, gpu_demotion_victim, max_pins
from workers.cache_policy.score import ScoreWeights, value_of
from workers.cache_policy.snapshot import EngineSnapshot, Resident


@dataclass(frozen=True)
class PolicyParams:
    weights: ScoreWeights = field(default_factory=ScoreWeights)
    rules: HardRules = field(default_factory=HardRules)
    # Pins hold GPU slots even while idle, and vLLM's scheduler admits up to --max-loras distinct
    # adapters per batch whatever is pinned: with fewer unpinned slots than distinct unpinned
    # adapters in a batch, activating one deactivates another of the same batch and the step
    # fails (vllm/lora/punica_wrapper/utils.py: convert_mapping). So pins always leave a slot
    # for every version with requests in flight (plus `gpu_spare_slots`), and are added only on
    # an engine that served at most `pin_max_busy` adapters at once lately (busy_peak): held
    # through a burst they would cost p99 TTFT.
    pin_max_busy: int = 1
    gpu_spare_slots: int = 0
    max_pinned_fraction: float = 1.0
    pin_min_share: float = 0.01  # share of all predicted demand a version needs to be pinned
    pin_hysteresis: float = 0.7  # keep-value bonus of a current pin: avoids pin/unpin churn
    prefetch_min_share: float | None = None  # Warm/Load versions at least this hot; None: never


def plan_actions(
    snapshot: EngineSnapshot,
    demand: DemandTracker,
    *,
    incoming: str | None = None,
    params: PolicyParams | None = None,
) -> list[Action]:
    """Actions for this engine now; `incoming` names a version a request is about to need."""
    p = params or PolicyParams()
    plan = _Plan(snapshot, demand, p)
    plan.repair_pins()
    # Pins first: a pin given up now (its slot is needed, the engine is busy) may be the one
    # version that can make room; evicting first left the choice to vLLM's LRU.
    plan.choose_pins(incoming)
    if incoming is not None:
        plan.make_room_for(incoming)
    if p.prefetch_min_share is not None:
        plan.prefetch(p.prefetch_min_share, exclude=incoming)
    return plan.actions


class _Plan:
    def __init__(self, snapshot: EngineSnapshot, demand: DemandTracker, p: PolicyParams) -> None:
        self.snap = snapshot
        self.p = p
        self.state: dict[str, Resident] = dict(snapshot.resident)
        self.actions: list[Action] = []
        self.value: dict[str, float] = {}
        self.pin_value: dict[str, float] = {}
        self.share: dict[str, float] = {}
        now = snapshot.now
        shares = demand.shares_and_hits(snapshot.versions)
        for name, info in snapshot.versions.items():
            share, hits = shares[name]
            res = snapshot.resident.get(name)
            idle = max(0.0, now - res.last_used) if res is not None else 0.0
            self.share[name] = share
            self.value[name] = value_of(
                info, share=share, recent_hits=hits, idle_s=idle, weights=p.weights
            )
            # Pins rank by predicted share alone: a pin saves the GPU copies of the requests it
            # serves, which delay every class alike and cost little per byte next to a load from
            # disk. Ranking them by `value` (the SLO boost, the reload cost) pinned gold and large
            # versions over busier ones: 1.6% to 4% more GPU copies than the best pin set
            # (bench/cachesim, goal 3) for no TTFT gain (mixed ranks: +0.3 ms mean either way).
            self.pin_value[name] = math.log(share + 1e-9)

    def _now(self) -> EngineSnapshot:
        return replace(self.snap, resident=self.state)

    def _unpin(self, name: str, reason: str) -> None:
        self.state[name] = replace(self.state[name], pinned=False)
        self.actions.append(Unpin(name, reason))

    def _activate(self, name: str) -> bool:
        """Mirror vLLM's GPU activation in the working state; False if no slot can be had."""
        if self.state[name].tier == "gpu":
            return True
        victim = gpu_demotion_victim(self.state, self.snap.gpu_slots, name)
        if victim is None:
            return False
        if victim:
            self.state[victim] = replace(self.state[victim], tier="cpu")
        self.state[name] = replace(self.state[name], tier="gpu")
        return True

    def _pin_limit(self, incoming: str | None) -> int:
        busy_now = sum(1 for r in self.state.values() if r.tier == "gpu" and r.in_flight)
        if max(busy_now, self.snap.busy_peak) > self.p.pin_max_busy:
            return 0
        share = int(self.snap.gpu_slots * self.p.max_pinned_fraction)
        rule = max_pins(self.snap, self.p.rules)
        return max(0, min(rule, share, self._unpinned_room(incoming)))

    def repair_pins(self) -> None:
        """Unpin the least valuable pins while a quota, the rank budget or pin limit is broken."""
        snap = self.snap
        pinned = sorted((n for n, r in self.state.items() if r.pinned), key=self.value.__getitem__)
        if not pinned:
            return
        tenant_pins: dict[str, int] = {}
        for n in pinned:
            tenant = snap.versions[n].tenant
            tenant_pins[tenant] = tenant_pins.get(tenant, 0) + 1
        rank_sum = sum(snap.versions[n].rank for n in pinned)
        count = len(pinned)
        budget = snap.pinned_rank_budget
        for name in pinned:
            info = snap.versions[name]
            if (
                tenant_pins[info.tenant] > snap.tenant_pin_quota.get(info.tenant, 0)
                or (budget is not None and rank_sum > budget)
                or count > max_pins(snap, self.p.rules)
                or info.rank > snap.max_lora_rank
            ):
                self._unpin(name, "over a quota, the rank budget or the pin limit")
                tenant_pins[info.tenant] -= 1
                rank_sum -= info.rank
                count -= 1

    def make_room_for(self, incoming: str) -> None:
        """Free a cache slot so vLLM's LRU never picks the victim; the engine loads on demand."""
        if incoming in self.state:
            return
        # Slots already promised to versions on their way in count as taken: freeing one now
        # only for the next arrival to take it would leave vLLM's LRU to pick this one's room.
        promised = len(self.snap.arriving - self.state.keys() - {incoming})
        if len(self.state) + promised < self.snap.cpu_slots:
            return
        now = self._now()
        candidates = [n for n in self.state if n != incoming and evictable(now, n, self.p.rules)]
        if not candidates:
            return  # every entry is pinned, busy or young gold: vLLM's own LRU decides
        victim = min(candidates, key=self.value.__getitem__)
        del self.state[victim]
        self.actions.append(Evict(victim, f"make room for {incoming}"))

    def _unpinned_needed(self, incoming: str | None) -> int:
        """GPU slots that must stay unpinned for the requests in flight and the incoming one."""
        need = {n for n, r in self.state.items() if r.in_flight and not r.pinned}
        if incoming is not None and not (incoming in self.state and self.state[incoming].pinned):
            need.add(incoming)
        return max(self.p.rules.min_unpinned_gpu, len(need) + self.p.gpu_spare_slots)

    def _unpinned_room(self, incoming: str | None) -> int:
        """How many pins the GPU slots can hold with the requests in flight served."""
        return max(0, self.snap.gpu_slots - self._unpinned_needed(incoming))

    def _pinnable(self, name: str) -> bool:
        info = self.snap.versions[name]
        return info.rank <= self.snap.max_lora_rank and self.share[name] >= self.p.pin_min_share

    def choose_pins(self, exclude: str | None) -> None:
        """Pin the most valuable versions in GPU slots, up to the limit; pins get a bonus."""
        snap = self.snap
        limit = self._pin_limit(exclude)
        bonus = {n: self.p.pin_hysteresis if r.pinned else 0.0 for n, r in self.state.items()}
        # Only versions already in a GPU slot: a pin then never costs a transfer, and pins that
        # were given up for a busy moment come back for free.
        ranked = sorted(
            (
                n
                for n, r in self.state.items()
                if n != exclude and r.tier == "gpu" and self._pinnable(n)
            ),
            key=lambda n: self.pin_value[n] + bonus[n],
            reverse=True,
        )
        # A pin serving requests keeps its slot either way: it stays, and counts.
        wanted = [n for n in ranked if self.state[n].pinned and self.state[n].in_flight]
        tenant_pins: dict[str, int] = {}
        for name in wanted:
            tenant = snap.versions[name].tenant
            tenant_pins[tenant] = tenant_pins.get(tenant, 0) + 1
        rank_sum = sum(snap.versions[n].rank for n in wanted)
        budget = snap.pinned_rank_budget
        for name in ranked:
            if name in wanted:
                continue
            if len(wanted) >= limit:
                break
            info = snap.versions[name]
            if tenant_pins.get(info.tenant, 0) >= snap.tenant_pin_quota.get(info.tenant, 0):
                continue
            if budget is not None and rank_sum + info.rank > budget:
                continue
            wanted.append(name)
            tenant_pins[info.tenant] = tenant_pins.get(info.tenant, 0) + 1
            rank_sum += info.rank
        for name, res in list(self.state.items()):
            if res.pinned and name not in wanted:
                self._unpin(name, "not among the most valuable, or its slot is needed")
        for name in wanted:
            if not self.state[name].pinned and self._activate(name):
                self.state[name] = replace(self.state[name], pinned=True)
                self.actions.append(Pin(name, f"predicted share {self.share[name]:.3g}"))

    def prefetch(self, min_share: float, exclude: str | None) -> None:
        """Warm hot cached versions into free GPU slots; load hot known ones into free CPU slots."""
        hot = sorted(
            (n for n in self.snap.versions if n != exclude and self.share[n] >= min_share),
            key=self.value.__getitem__,
            reverse=True,
        )
        for name in hot:
            if self.snap.versions[name].rank > self.snap.max_lora_rank:
                continue
            on_gpu = sum(1 for r in self.state.values() if r.tier == "gpu")
            if on_gpu >= self.snap.gpu_slots:
                return  # only free slots: a prefetch never pushes anything out
            res = self.state.get(name)
            if res is None and len(self.state) < self.snap.cpu_slots:
                now = self.snap.now
                self.state[name] = Resident(name, "cpu", loaded_at=now, last_used=now)
                self._activate(name)
                self.actions.append(Load(name, f"prefetch, predicted share {self.share[name]:.3g}"))
            elif res is not None and res.tier == "cpu":
                self._activate(name)
                self.actions.append(Warm(name, f"predicted share {self.share[name]:.3g}"))
