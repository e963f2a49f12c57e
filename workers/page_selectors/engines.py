"""Read-only views of the fleet for the server-rendered pages: slots per tier of many engines, one
engine's rows, advice, history and warm-up entries, and the placement of many versions at once."""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q
from django.urls import reverse
from django_celery_beat.models import PeriodicTask
from redis.exceptions import RedisError

from adapters.access import AccessContext
from adapters.models import Adapter, AdapterVersion, VersionStatus
from adapters.selectors import pool_of
from tenants.access_port import Access
from tenants.models import ServiceClass
from workers import shared_state
from workers.advisor import Advice, launch_flags
from workers.advisor_selectors import lora_modules
from workers.alarms import open_alarms
from workers.models import Engine, FleetAction, Residency, ResidencyState
from workers.schedule_rules import pool_expression
from workers.schedules import TASK_NAME as WARMUP_TASK
from workers.selectors import (
    engine_advice,
    placement_row,
    residencies_of_engine,
    tier_of,
)
from workers.services.operator import engine_pin_capacity

HOT_STATES = (ResidencyState.RESIDENT_GPU, ResidencyState.PINNED)
ACTION_HISTORY = 50
DASHBOARD_VERSIONS = 50
BANNER_ALARMS = 10


@dataclass(frozen=True)
class EngineSlots:
    """One engine's occupancy, from observed state (hot, warm) and desired state (pins)."""

    engine: Engine
    hot: int  # observed in a GPU slot (resident_gpu or pinned), of max_loras
    warm: int  # observed in the engine's CPU cache only (resident_cpu)
    staged: int  # verified on the node's disk and not quarantined
    pinned: int  # desired pinned: what the pin budget counts
    pin_capacity: int
    open_alarms: int

    @property
    def cache_used(self) -> int:
        # vLLM's CPU cache (max_cpu_loras) also holds the adapters active in GPU slots.
        return self.hot + self.warm


def engine_slots(engines: Iterable[Engine]) -> list[EngineSlots]:
    """Slots per tier of each engine: two queries whatever the number of engines or rows."""
    engines = list(engines)
    ids = [e.pk for e in engines]
    counts = {
        row["engine_id"]: (row["hot"], row["warm"], row["staged"], row["pinned"])
        for row in Residency.objects.filter(engine_id__in=ids)
        .order_by()
        .values("engine_id")
        .annotate(
            hot=Count("id", filter=Q(observed_state__in=HOT_STATES)),
            warm=Count("id", filter=Q(observed_state=ResidencyState.RESIDENT_CPU)),
            staged=Count("id", filter=Q(staged_at__isnull=False, quarantined_at__isnull=True)),
            pinned=Count("id", filter=Q(desired_state=ResidencyState.PINNED)),
        )
    }
    alarms = dict(
        open_alarms()
        .filter(engine_id__in=ids)
        .order_by()
        .values("engine_id")
        .annotate(n=Count("id"))
        .values_list("engine_id", "n")
    )
    out = []
    for e in engines:
        hot, warm, staged, pinned = counts.get(e.pk, (0, 0, 0, 0))
        out.append(
            EngineSlots(
                engine=e,
                hot=hot,
                warm=warm,
                staged=staged,
                pinned=pinned,
                pin_capacity=engine_pin_capacity(e),
                open_alarms=alarms.get(e.pk, 0),
            )
        )
    return out


def all_engine_slots() -> list[EngineSlots]:
    return engine_slots(Engine.objects.select_related("base_model").order_by("name"))


def version_label(version: AdapterVersion) -> str:
    """`tenant/adapter@N`: how operators name a version (workers.selectors.version_from_label)."""
    return f"{version.tenant.slug}/{version.adapter.name}@{version.number}"


@dataclass(frozen=True)
class ResidencyView:
    row: Residency
    tier: str
    label: str

    @property
    def can_pin(self) -> bool:
        return self.row.desired_state != ResidencyState.PINNED

    @property
    def can_unpin(self) -> bool:
        return self.row.desired_state == ResidencyState.PINNED

    @property
    def can_warm(self) -> bool:
        return self.row.desired_state not in HOT_STATES

    @property
    def can_evict(self) -> bool:
        absent = ResidencyState.ABSENT
        return self.row.desired_state != absent or self.row.observed_state != absent


def _view(row: Residency) -> ResidencyView:
    return ResidencyView(row=row, tier=tier_of(row), label=version_label(row.version))


def residency_views(engine: Engine) -> list[ResidencyView]:
    rows = residencies_of_engine(engine).order_by(
        "version__tenant__slug", "version__adapter__name", "version__number"
    )
    return [_view(row) for row in rows]


def residency_view(engine: Engine, version: AdapterVersion) -> ResidencyView | None:
    row = residencies_of_engine(engine).filter(version=version).first()
    return _view(row) if row is not None else None


def alarm_banner() -> dict[str, Any]:
    """Open alarms of the whole fleet, newest first, for the operators' banner."""
    alarms = open_alarms()
    return {"alarms": list(alarms[:BANNER_ALARMS]), "alarm_count": alarms.count()}


def engine_advice_and_launch(engine: Engine) -> dict[str, Any]:
    """The advice (flags now vs advised, reasons) and the launch command built from that same
    advice, so the page never shows a command that disagrees with the advice above it."""
    advice = engine_advice(engine)
    modules = lora_modules(engine)
    flags = launch_flags(
        engine,
        Advice(
            flags=advice["advised"],
            reasons=advice["reasons"],
            changed=advice["changed"],
            current=advice["current"],
        ),
        modules=modules,
    )
    command = [
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        engine.base_model.source or engine.base_model.name,
        *flags,
    ]
    rows = [
        {
            "flag": "--" + name.replace("_", "-"),
            "current": advice["current"][name],
            "advised": advice["advised"][name],
        }
        for name in advice["advised"]
    ]
    return {
        "advice": advice,
        "advice_rows": rows,
        "launch_flags": flags,
        "launch_command": shlex.join(command),
        "lora_modules": modules,
    }


def recent_actions(engine: Engine) -> list[FleetAction]:
    return list(
        FleetAction.objects.filter(engine=engine).select_related(
            "version__adapter", "version__tenant"
        )[:ACTION_HISTORY]
    )


@dataclass(frozen=True)
class WarmupEntry:
    entry: PeriodicTask
    adapter: Adapter
    phase: str

    @property
    def admin_url(self) -> str:
        return reverse("admin:django_celery_beat_periodictask_change", args=[self.entry.pk])


def parsed_warmup_entries() -> list[tuple[PeriodicTask, int, str]]:
    """(entry, adapter id, phase) of every warm-up beat entry, found by task and kwargs."""
    parsed: list[tuple[PeriodicTask, int, str]] = []
    for entry in PeriodicTask.objects.filter(task=WARMUP_TASK).select_related("crontab"):
        try:
            kwargs = json.loads(entry.kwargs or "{}")
            parsed.append((entry, int(kwargs["adapter_id"]), str(kwargs.get("phase", ""))))
        except (ValueError, KeyError, TypeError):
            continue  # hand-made entries with other arguments are not ours to show
    return parsed


def warmup_entries(engine: Engine) -> list[WarmupEntry]:
    """The warm-up beat entries of adapters that run on this engine's pool and base model.

    Entries are found by their task and kwargs (as workers.schedules does), not by name, so an
    entry an operator renamed in the admin is still listed. Two queries.
    """
    parsed = parsed_warmup_entries()
    adapters = {
        a.pk: a
        for a in Adapter.objects.filter(
            pk__in={adapter_id for _, adapter_id, _ in parsed},
            base_model_id=engine.base_model_id,
        )
        .annotate(effective_pool=pool_expression())
        .filter(effective_pool=engine.pool)
        .select_related("tenant")
    }
    out = [
        WarmupEntry(entry=entry, adapter=adapters[adapter_id], phase=phase)
        for entry, adapter_id, phase in parsed
        if adapter_id in adapters
    ]
    return sorted(out, key=lambda w: (str(w.adapter), w.phase))


# --- where versions run ---


def placements_of(versions: Sequence[AdapterVersion]) -> dict[int, list[dict[str, object]]]:
    """`workers.selectors.version_placement` for many versions at once, in two queries; the same
    rows in the same order (tests/pages/test_fleet_pages.py checks that against the selector)."""
    if not versions:
        return {}
    base_ids = {v.adapter.base_model_id for v in versions}
    engines = list(Engine.objects.filter(base_model_id__in=base_ids).order_by("name"))
    held: dict[int, list[Residency]] = defaultdict(list)
    for row in (
        Residency.objects.filter(version__in=[v.pk for v in versions])
        .select_related("engine", "version")
        .order_by("engine_id", "version_id")
    ):
        held[row.version_id].append(row)
    out: dict[int, list[dict[str, object]]] = {}
    for version in versions:
        rows = {r.engine_id: r for r in held.get(version.pk, [])}
        pool, rank = pool_of(version.adapter), version.rank or 0
        placement = [
            placement_row(e, version, rows.pop(e.pk, None))
            for e in engines
            if e.pool == pool
            and e.base_model_id == version.adapter.base_model_id
            and e.max_lora_rank >= rank
        ]
        placement += [placement_row(r.engine, version, r) for r in rows.values()]
        out[version.pk] = placement
    return out


def member_versions(access: Access) -> list[AdapterVersion]:
    """Active versions of the tenants the caller is a member of (not every tenant an admin sees)."""
    if not access.memberships:
        return []
    return list(
        AdapterVersion.objects.filter(
            tenant_id__in=list(access.memberships), status=VersionStatus.ACTIVE
        )
        .select_related("adapter__tenant", "tenant")
        .order_by("tenant__slug", "adapter__name", "number")[:DASHBOARD_VERSIONS]
    )


def fleet_totals(slots: Sequence[EngineSlots]) -> dict[str, int]:
    """The dashboard's fleet numbers, summed from the engines' slots (no extra query)."""
    return {
        "engines": len(slots),
        "engines_up": sum(1 for s in slots if s.engine.state == "up"),
        "gpu_slots": sum(s.engine.max_loras for s in slots),
        "hot": sum(s.hot for s in slots),
        "cpu_slots": sum(s.engine.max_cpu_loras for s in slots),
        "cache_used": sum(s.cache_used for s in slots),
        "staged": sum(s.staged for s in slots),
        "pinned": sum(s.pinned for s in slots),
        "open_alarms": sum(s.open_alarms for s in slots),
    }


def dashboard_fleet(*, user: Any) -> dict[str, Any]:
    """The dashboard's fleet parts: slots per engine for operators, placements for members."""
    access = AccessContext.for_user(user)
    context: dict[str, Any] = {"fleet_engines": None, "member_versions": []}
    if access.sees_engines:
        slots = all_engine_slots()
        context["fleet_engines"] = slots
        context["fleet_totals"] = fleet_totals(slots)
        context["fleet_alarms"] = alarm_banner()
    versions = member_versions(access)
    placements = placements_of(versions)
    context["member_versions"] = [
        {"version": v, "label": version_label(v), "placement": placements[v.pk]} for v in versions
    ]
    return context


@dataclass(frozen=True)
class ClassLoad:
    """One service class on an engine now: the slots its requests hold there (every gateway
    replica's, from the admission's load hash) against its plan's weight."""

    name: str
    slots: int
    weight: int
    max_queue_wait_ms: int
    sheddable: bool


def class_loads(engine: Engine) -> list[ClassLoad]:
    """The engine's slots by service class (docs/classes.md), heaviest class first; a Redis that
    does not answer shows none."""
    try:
        held = shared_state.engines_class_slots([engine.name]).get(engine.name, {})
    except RedisError:
        held = {}
    return [
        ClassLoad(c.name, held.get(c.name, 0), c.weight, c.max_queue_wait_ms, c.sheddable)
        for c in ServiceClass.objects.all()
    ]
