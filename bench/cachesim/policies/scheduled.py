"""`portal` with warm-up schedules and prefetch, through the controller's own converge pass.

The schedule is configuration an operator set (`preload_on_business_hours` windows, a keep-warm
wish from a release on), handed in as `Windows`; inside a window, opened `lead_s` early so the
load is done before the first caller, the version is a keep-warm wish. Every tick and every miss
runs workers.controller_plan.plan_converge, the function the production controller runs, with the
residents as on-demand wishes and the open windows as keep-warm ones; prefetch (plan_actions'
Load/Warm into free slots) is on. A miss never loads its own version here: the engine does that
as the request arrives, so the request is counted cold, as a caller would feel it.
"""

from __future__ import annotations

from dataclasses import replace

from bench.cachesim.engine import EngineModel
from bench.cachesim.policies.portal import Portal
from bench.cachesim.structured import Windows
from bench.cachesim.trace import TraceRequest
from workers.cache_policy import Action, DemandParams, Load, Pin, PolicyParams, Warm
from workers.controller_plan import WANT_ON_DEMAND, WANT_WARM, plan_converge


class PortalScheduled(Portal):
    name = "portal-sched"

    def __init__(
        self,
        windows: Windows | None = None,
        *,
        lead_s: float = 60.0,
        prefetch_min_share: float | None = 0.02,
        tick_s: float = 30.0,
        demand: DemandParams | None = None,
    ) -> None:
        super().__init__(
            PolicyParams(prefetch_min_share=prefetch_min_share), demand=demand, tick_s=tick_s
        )
        self.windows = windows or {}
        self.lead_s = lead_s

    def _open(self, now: float) -> list[str]:
        t = now + self.lead_s
        return [v for v, spans in self.windows.items() if any(a <= t < b for a, b in spans)]

    def _plan(self, engine: EngineModel, now: float, incoming: str | None) -> list[Action]:
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
