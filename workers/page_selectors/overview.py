"""Fleet-wide reads for the operators' overview pages: pools, residency across engines,
warm-up entries of every adapter, open alarms. Bounded: a page shows at most ROW_LIMIT rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from adapters.models import Adapter
from tenants.models import Tenant
from workers.models import Residency, ResidencyState
from workers.page_selectors.engines import (
    EngineSlots,
    WarmupEntry,
    all_engine_slots,
    parsed_warmup_entries,
    version_label,
)
from workers.schedule_rules import pool_expression
from workers.selectors import tier_of

ROW_LIMIT = 500


@dataclass
class PoolView:
    name: str
    engines: list[EngineSlots] = field(default_factory=list)
    tenants: list[str] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)

    @property
    def gpu_slots(self) -> int:
        return sum(s.engine.max_loras for s in self.engines)

    @property
    def hot(self) -> int:
        return sum(s.hot for s in self.engines)

    @property
    def pinned(self) -> int:
        return sum(s.pinned for s in self.engines)

    @property
    def engines_up(self) -> int:
        return sum(1 for s in self.engines if s.engine.state == "up")


def pools() -> list[PoolView]:
    """Every pool with its engines' slots, and the tenants and adapters bound to it by name
    (everything unbound runs in the default pool)."""
    views: dict[str, PoolView] = {}

    def view(name: str) -> PoolView:
        return views.setdefault(name, PoolView(name=name))

    view(settings.DEFAULT_POOL)
    for slots in all_engine_slots():
        view(slots.engine.pool).engines.append(slots)
    for slug, pool in Tenant.objects.exclude(pool="").values_list("slug", "pool"):
        view(pool).tenants.append(slug)
    for tenant, name, pool in (
        Adapter.objects.exclude(pool="")
        .order_by("tenant__slug", "name")
        .values_list("tenant__slug", "name", "pool")
    ):
        view(pool).adapters.append(f"{tenant}/{name}")
    return sorted(views.values(), key=lambda p: p.name)


@dataclass(frozen=True)
class FleetResidency:
    row: Residency
    tier: str
    label: str


def fleet_residency(*, engine: str = "", tenant: str = "", pinned_only: bool = False) -> list[Any]:
    """Residency rows across the fleet, engine by engine, narrowed by the page's filters."""
    qs: QuerySet[Residency] = Residency.objects.select_related(
        "engine", "version__adapter", "version__tenant"
    ).order_by("engine__name", "version__tenant__slug", "version__adapter__name", "version__number")
    if engine:
        qs = qs.filter(engine__name=engine)
    if tenant:
        qs = qs.filter(version__tenant__slug=tenant)
    if pinned_only:
        qs = qs.filter(desired_state=ResidencyState.PINNED)
    return [
        FleetResidency(row=r, tier=tier_of(r), label=version_label(r.version))
        for r in qs[:ROW_LIMIT]
    ]


def all_warmup_entries() -> list[WarmupEntry]:
    """Every warm-up beat entry the schedules made, with its adapter (found by the entry's kwargs,
    as workers.page_selectors.engines.warmup_entries does for one engine)."""
    parsed = parsed_warmup_entries()
    adapters = {
        a.pk: a
        for a in Adapter.objects.filter(pk__in={a for _, a, _ in parsed}).select_related("tenant")
    }
    out = [
        WarmupEntry(entry=e, adapter=adapters[a], phase=p) for e, a, p in parsed if a in adapters
    ]
    return sorted(out, key=lambda w: (str(w.adapter), w.phase))[:ROW_LIMIT]


def scheduled_adapters() -> QuerySet[Adapter]:
    """Adapters whose warm-up policy is not on-demand: what the schedules act for."""
    return (
        Adapter.objects.exclude(warmup_policy="on_demand")
        .annotate(effective_pool=pool_expression())
        .select_related("tenant")
        .order_by("tenant__slug", "name")[:ROW_LIMIT]
    )


def fleet_advice() -> list[dict[str, Any]]:
    """The flag advisor for every engine: flags now and advised, and why (one engine's page
    shows the same advice with its launch command)."""
    from workers.models import Engine
    from workers.selectors import engine_advice

    out = []
    for engine in Engine.objects.select_related("base_model").order_by("name")[:ROW_LIMIT]:
        advice = engine_advice(engine)
        rows = [
            {
                "flag": "--" + name.replace("_", "-"),
                "current": advice["current"][name],
                "advised": value,
            }
            for name, value in advice["advised"].items()
        ]
        out.append({"engine": engine, "advice": advice, "rows": rows})
    return out
