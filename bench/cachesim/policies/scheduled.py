"""`portal` with warm-up schedules and prefetch, through the controller's own converge pass.

The schedule is configuration an operator set (`preload_on_business_hours` windows, a keep-warm
wish from a release on), handed in as `Windows`; inside a window the version is a keep-warm
wish. The window opens at its start, as the production schedule's beat entry does
(`lead_s` = 0): opened 60 s early, the loads pushed out versions still serving the zones open
then, and business hours had 556 cold requests instead of 534 (bench/cachesim, seeds 1-3).
The tracker is told each tenant's hours (the windows of its versions, as the controller tells it
from its adapters' windows), so a tenant's share follows its hours the moment they open or close.

Every tick and every miss runs workers.controller_plan.plan_converge, the function the production
controller runs, with the residents as on-demand wishes and the open windows as keep-warm ones;
prefetch (plan_actions' Load/Warm into free slots) is on. A miss never loads its own version
here: the engine does that as the request arrives, so the request is counted cold, as a caller
would feel it.
"""

from __future__ import annotations

from dataclasses import replace

from bench.cachesim.engine import EngineModel
from bench.cachesim.policies.base import SimContext
from bench.cachesim.policies.portal import Portal
from bench.cachesim.structured import Windows
from bench.cachesim.trace import TraceRequest
from workers.cache_policy import Action, DemandParams, Load, Pin, PolicyParams, Warm
from workers.cache_policy.demand import demand_group
from workers.controller_plan import WANT_ON_DEMAND, WANT_WARM, plan_converge


class PortalScheduled(Portal):
    name = "portal-sched"

    def __init__(
        self,
        windows: Windows | None = None,
        *,
        lead_s: float = 0.0,
        prefetch_min_share: float | None = 0.02,
        tick_s: float = 30.0,
        demand: DemandParams | None = None,
    ) -> None:
        super().__init__(
            PolicyParams(prefetch_min_share=prefetch_min_share), demand=demand, tick_s=tick_s
        )
        self.windows = windows or {}
        self.lead_s = lead_s
        # A tenant's business hours: the windows of its scheduled versions.
        self.tenant_windows: dict[str, list[tuple[float, float]]] = {}
        for version, spans in self.windows.items():
            self.tenant_windows.setdefault(demand_group(version), []).extend(spans)

    def attach(self, ctx: SimContext) -> None:
        super().attach(ctx)
        self.demand.set_hours(self._hours)

    def _hours(self, group: str, t: float) -> bool | None:
        spans = self.tenant_windows.get(group)
        if spans is None:
            return None
        return any(a <= t < b for a, b in spans)

    def _open(self, now: float) -> list[str]:
        t = now + self.lead_s
        return [v for v, spans in self.windows.items() if any(a <= t < b for a, b in spans)]

    def _plan(self, engine: EngineModel, now: float, incoming: str | None) -> list[Action]:
        self.demand.advance(now)
        warm = [v for v in self._open(now) if v in self.ctx.catalog]
        snap = self.snapshot(engine, now, incoming)
        extra = {v: self.ctx.catalog[v] for v in warm if v not in snap.versions}
        snap = replace(snap, versions={**snap.versions, **extra})
        wanted = {v: WANT_ON_DEMAND for v in engine.cpu} | {v: WANT_WARM for v in warm}
        if incoming is not None:
            wanted.setdefault(incoming, WANT_ON_DEMAND)
        plan = plan_converge(
            snap, self.demand, wanted=wanted, incoming=incoming, params=self.params
        )
        # The incoming version is loaded by its request, not by the plan: no Load, and no Pin or
        # Warm the plan chained onto that Load.
        return [
            a
            for a in plan.actions
            if not (a.version == incoming and isinstance(a, Load | Pin | Warm))
        ]

    def on_miss(self, engine: EngineModel, req: TraceRequest, now: float) -> list[Action]:
        return self._plan(engine, now, req.adapter)

    def on_tick(self, engine: EngineModel, now: float) -> list[Action]:
        return self._plan(engine, now, None)
