"""The portal's policy (workers.cache_policy), imported as the cache controller will call it."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from bench.cachesim.engine import EngineModel
from bench.cachesim.policies.base import Controller, SimContext
from bench.cachesim.trace import TraceRequest
from workers.cache_policy import (
    Action,
    DemandParams,
    DemandTracker,
    EngineSnapshot,
    PolicyParams,
    Resident,
    ScoreWeights,
    plan_actions,
)
from workers.cache_policy.fairness import FairnessGovernor, protected_params


class Portal(Controller):
    """Gold's protection is derived (workers.cache_policy.fairness): every tick the governor
    steps the gold boost from each class's cold loads against a shadow LRU's on the same
    requests; there is no fixed minimum residency in seconds (an earlier fixed 300 s was too blunt)."""

    name = "portal"

    def __init__(
        self,
        params: PolicyParams | None = None,
        demand: DemandParams | None = None,
        tick_s: float = 30.0,
        busy_window_s: float = 300.0,
        derived_protection: bool = True,
    ) -> None:
        self.params = params or PolicyParams()
        self.demand_params = demand
        self.tick_s = tick_s
        self.busy_window_s = busy_window_s
        self.derived_protection = derived_protection

    def attach(self, ctx: SimContext) -> None:
        super().attach(ctx)
        self.params = replace(self.params, rules=ctx.rules)  # the run's rules are the ones in force
        if self.derived_protection:
            self.params = protected_params(self.params, 1.0)
        # One governor for the pool, its LRU reference as large as every engine's cache together
        # (engine choice splits the versions between them), as the controller keeps it.
        self.governor = FairnessGovernor(sum(e.cpu_slots for e in ctx.engines))
        self.gold_boost = 1.0
        self.demand = DemandTracker(self.demand_params)
        # Per engine, (time, busy GPU slots) with busy decreasing: a sliding-window maximum.
        self.busy: dict[str, deque[tuple[float, int]]] = {e.name: deque() for e in ctx.engines}

    def _busy_peak(self, engine: EngineModel, now: float) -> int:
        """The controller's view of load: most GPU slots busy at once over the last window."""
        window = self.busy[engine.name]
        busy = len(engine.running)
        while window and window[-1][1] <= busy:
            window.pop()
        window.append((now, busy))
        while window[0][0] < now - self.busy_window_s:
            window.popleft()
        return window[0][1]

    def observe(self, engine: EngineModel, req: TraceRequest, now: float) -> None:
        if self.derived_protection:
            # A cold load, as the gateway marks it: out of the cache and no request of the same
            # version already waiting for its load (those share it).
            starts_load = req.adapter not in engine.cpu and not engine.queued.get(req.adapter)
            self.governor.observe(req.adapter, req.slo, starts_load)
        self.demand.observe(req.adapter, now, follow_up=req.follow_up)
        self._busy_peak(engine, now)

    def snapshot(self, engine: EngineModel, now: float, incoming: str | None) -> EngineSnapshot:
        resident = {
            v: Resident(
                name=v,
                tier="gpu" if v in engine.gpu else "cpu",
                pinned=v in engine.pinned,
                # The gateway's view: requests sent to the engine, running or still queued.
                in_flight=engine.running.get(v, 0) + engine.queued.get(v, 0),
                loaded_at=engine.loaded_at.get(v, 0.0),
                last_used=engine.last_used.get(v, 0.0),
            )
            for v in engine.cpu
        }
        names = list(resident) + ([incoming] if incoming and incoming not in resident else [])
        return EngineSnapshot(
            engine=engine.name,
            now=now,
            gpu_slots=engine.gpu_slots,
            cpu_slots=engine.cpu_slots,
            max_lora_rank=self.ctx.max_lora_rank,
            resident=resident,
            versions={v: self.ctx.catalog[v] for v in names},
            tenant_pin_quota=self.ctx.tenant_pin_quota,
            pinned_rank_budget=self.ctx.pinned_rank_budget,
            busy_peak=self._busy_peak(engine, now),
            arriving=frozenset(v for v in engine.queued if v not in engine.cpu),
        )

    def on_miss(self, engine: EngineModel, req: TraceRequest, now: float) -> list[Action]:
        self.demand.advance(now)
        snap = self.snapshot(engine, now, req.adapter)
        return plan_actions(snap, self.demand, incoming=req.adapter, params=self.params)

    def on_tick(self, engine: EngineModel, now: float) -> list[Action]:
        if self.derived_protection:
            self._derive_protection()
        self.demand.advance(now)
        return plan_actions(self.snapshot(engine, now, None), self.demand, params=self.params)

    def _derive_protection(self) -> None:
        boost = self.governor.tick()
        if boost != self.gold_boost:
            self.gold_boost = boost
            self.params = protected_params(self.params, boost)


class PortalNoSlo(Portal):
    """`portal` without its SLO protections (tenant priority 0, no gold minimum residency): shows
    what keeping gold versions costs in cold loads overall."""

    name = "portal-noslo"

    def __init__(self) -> None:
        super().__init__(PolicyParams(weights=ScoreWeights(priority=0.0)), derived_protection=False)

    def attach(self, ctx: SimContext) -> None:
        super().attach(ctx)
        self.params = replace(self.params, rules=replace(ctx.rules, gold_min_residency_s=0.0))
