"""The hard rules a warm-up policy must keep (the window itself is the registry's:
adapters/warmup_window.py).

Pure reads: the registry asks `warmup_problems` before it saves a policy, workers.schedules again
before it applies one, and the controller asks `in_window` at reconcile time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import Count, F, Max, Q, QuerySet, Value
from django.db.models.functions import Coalesce, NullIf
from django.utils import timezone

from adapters.models import Adapter, VersionStatus, WarmupPolicy
from adapters.selectors import pool_of
from adapters.warmup_window import Problem, WarmupWindow, window_contains, window_problems
from tenants.models import Tenant
from workers.cache_policy.rules import HardRules, max_pins
from workers.cache_policy.snapshot import EngineSnapshot
from workers.models import Engine

# Policies that keep versions in the engine cache: always, or inside a window (counted as if
# always, since windows of different adapters may overlap).
WARM_POLICIES = (WarmupPolicy.ALWAYS_WARM, WarmupPolicy.PRELOAD_BUSINESS_HOURS)
KEPT_POLICIES = (*WARM_POLICIES, WarmupPolicy.PINNED)


# --- the window ---


def in_window(adapter: Adapter, now: datetime | None = None) -> bool:
    """Whether the adapter's business-hours window is open at `now` (default: now)."""
    return window_contains(WarmupWindow.of(adapter), now or timezone.now())


def tenant_hours() -> Callable[[str, float], bool | None]:
    """Each tenant's business hours as the demand tracker reads them (cache_policy.hours): open
    at a unix time when a window of any of its preload_on_business_hours adapters is; None for
    a tenant with none. One query; the windows are read once, when this is called."""
    by_tenant: dict[str, list[WarmupWindow]] = {}
    for adapter in Adapter.objects.filter(
        warmup_policy=WarmupPolicy.PRELOAD_BUSINESS_HOURS
    ).select_related("tenant"):
        by_tenant.setdefault(adapter.tenant.slug, []).append(WarmupWindow.of(adapter))

    def hours(tenant: str, at: float) -> bool | None:
        windows = by_tenant.get(tenant)
        if windows is None:
            return None
        moment = datetime.fromtimestamp(at, tz=UTC)
        return any(window_contains(w, moment) for w in windows)

    return hours


# --- the hard rules ---


def pool_expression() -> Coalesce:
    """pool_of in SQL, so the rules count the adapters of a pool in one query."""
    return Coalesce(
        NullIf(F("pool"), Value("")),
        NullIf(F("tenant__pool"), Value("")),
        Value(settings.DEFAULT_POOL),
    )


@dataclass(frozen=True)
class _Kept:
    """An adapter the fleet keeps warm or pinned, and the engine-cache slots it needs."""

    label: str
    policy: str
    slots: int


def _slots(active_versions: int) -> int:
    # Every active version is warmed or pinned on its own (canaries); an adapter with none yet
    # is counted as one, so releasing its first version cannot break the rules it passed.
    return max(1, active_versions)


def _kept(qs: QuerySet[Adapter]) -> list[_Kept]:
    rows = qs.annotate(
        active=Count("versions", filter=Q(versions__status=VersionStatus.ACTIVE))
    ).values_list("tenant__slug", "name", "warmup_policy", "active")
    return [_Kept(f"{t}/{n}", policy, _slots(active)) for t, n, policy, active in rows]


def _active(adapter: Adapter) -> tuple[int, int]:
    """How many active versions the adapter has, and the largest rank among them."""
    if not adapter.pk:
        return 0, 0
    got = adapter.versions.filter(status=VersionStatus.ACTIVE).aggregate(
        n=Count("id"), rank=Max("rank")
    )
    return got["n"], got["rank"] or 0


def _others(adapter: Adapter) -> QuerySet[Adapter]:
    qs = Adapter.objects.filter(warmup_policy__in=KEPT_POLICIES)
    return qs.exclude(pk=adapter.pk) if adapter.pk else qs


def pool_engines(adapter: Adapter, *, min_rank: int = 0) -> list[Engine]:
    """Engines of the adapter's pool that serve its base model and rank (any state: a down
    engine comes back and gets its pins again)."""
    return list(
        Engine.objects.filter(
            pool=pool_of(adapter),
            base_model_id=adapter.base_model_id,
            max_lora_rank__gte=min_rank,
        ).order_by("name")
    )


def _engine_max_pins(engine: Engine) -> int:
    """The cache policy's own limit (one GPU and one CPU-cache slot stay unpinned)."""
    snapshot = EngineSnapshot(
        engine=engine.name,
        now=0.0,
        gpu_slots=engine.max_loras,
        cpu_slots=engine.max_cpu_loras,
        max_lora_rank=engine.max_lora_rank,
        resident={},
        versions={},
    )
    return max_pins(snapshot, HardRules())


def warmup_problems(
    *, adapter: Adapter, policy: str | None = None, window: WarmupWindow | None = None
) -> list[Problem]:
    """The hard rules `policy` (default: the adapter's) would break, each with what to do.

    The adapter's other fields (pool, tenant, base model) are taken as they are on the object,
    so a caller checks a change by setting them first. Other adapters count as saved.
    """
    policy = policy or adapter.warmup_policy
    if policy not in KEPT_POLICIES:
        return []
    out: list[Problem] = []
    if policy == WarmupPolicy.PRELOAD_BUSINESS_HOURS:
        out += window_problems(window or WarmupWindow.of(adapter))
    active, rank = _active(adapter)
    own = _Kept(str(adapter), policy, _slots(active))
    if policy == WarmupPolicy.PINNED:
        out += _pin_quota_problems(adapter, own)
    else:
        out += _warm_quota_problems(adapter, own)
    engines = pool_engines(adapter, min_rank=rank)
    pool = pool_of(adapter)
    if not engines:
        fits = f" whose max_lora_rank admits rank {rank}" if rank else ""
        out.append(
            Problem(
                "schedule.no_engine",
                f"Pool '{pool}' has no engine for base model '{adapter.base_model.name}'{fits}, "
                f"so nothing can be kept warm or pinned for {adapter}. Use on_demand, or ask a "
                "platform admin to bind the adapter to a pool that serves it.",
                "pool",
            )
        )
        return out
    in_pool = _kept(
        _others(adapter)
        .annotate(effective_pool=pool_expression())
        .filter(effective_pool=pool, base_model_id=adapter.base_model_id)
    ) + [own]
    pinned = sum(k.slots for k in in_pool if k.policy == WarmupPolicy.PINNED)
    warm = sum(k.slots for k in in_pool if k.policy in WARM_POLICIES)
    if policy == WarmupPolicy.PINNED:
        out += _pin_budget_problems(pool, adapter, engines, pinned)
    out += _free_slot_problems(pool, engines, warm=warm, pinned=pinned)
    return out


def _pin_quota_problems(adapter: Adapter, own: _Kept) -> list[Problem]:
    tenant = adapter.tenant
    kept = _kept(_others(adapter).filter(tenant_id=tenant.pk, warmup_policy=WarmupPolicy.PINNED))
    needed = sum(k.slots for k in kept) + own.slots
    if needed <= tenant.quota_pinned_slots:
        return []
    holders = ", ".join(k.label for k in kept) or "none"
    return [
        Problem(
            "schedule.pin_quota",
            f"Tenant '{tenant.slug}' may pin {tenant.quota_pinned_slots} slot(s) "
            f"(quota_pinned_slots); pinning {adapter} needs {own.slots} more while {holders} "
            f"already hold {needed - own.slots}. Unpin another adapter, use always_warm, or ask "
            "a platform admin to raise the quota.",
            "warmup_policy",
        )
    ]


def _warm_quota_problems(adapter: Adapter, own: _Kept) -> list[Problem]:
    """Always-warm and business-hours adapters hold an engine-cache slot on every engine of
    their pool: a tenant keeps at most its plan's quota_warm_slots of them, whatever room the
    pool has, so it cannot crowd out the long tail of other tenants."""
    tenant = adapter.tenant
    kept = _kept(_others(adapter).filter(tenant_id=tenant.pk, warmup_policy__in=WARM_POLICIES))
    needed = sum(k.slots for k in kept) + own.slots
    if needed <= tenant.quota_warm_slots:
        return []
    holders = ", ".join(k.label for k in kept) or "none"
    return [
        Problem(
            "schedule.warm_quota",
            f"Tenant '{tenant.slug}' may keep {tenant.quota_warm_slots} version(s) warm "
            f"(quota_warm_slots); keeping {adapter} warm needs {own.slots} more while {holders} "
            f"already hold {needed - own.slots}. Use on_demand for another adapter, or ask a "
            "platform admin to raise the quota.",
            "warmup_policy",
        )
    ]


def _pin_budget_problems(
    pool: str, adapter: Adapter, engines: list[Engine], pinned: int
) -> list[Problem]:
    capacity = {e.name: _engine_max_pins(e) for e in engines}
    total = sum(capacity.values())
    if pinned <= total:
        return []
    per_engine = ", ".join(f"{name}: {n}" for name, n in capacity.items())
    return [
        Problem(
            "schedule.pin_budget",
            f"Pool '{pool}' can pin {total} version(s) of base model "
            f"'{adapter.base_model.name}' ({per_engine}; one GPU and one CPU-cache slot per "
            f"engine always stay unpinned), and its pinned adapters would need {pinned}. "
            "Use always_warm, unpin another adapter, or ask an operator for more engines.",
            "warmup_policy",
        )
    ]


def _free_slot_problems(
    pool: str, engines: list[Engine], *, warm: int, pinned: int
) -> list[Problem]:
    # Warm versions sit on every engine of the pool, each pinned one on one of them: every
    # engine must keep one CPU-cache slot free, or vLLM has nowhere to load anything else.
    room = {e.name: e.max_cpu_loras - 1 for e in engines}
    full = [f"{name} (keeps at most {n})" for name, n in room.items() if warm > n]
    if full:
        return [
            Problem(
                "schedule.last_free_slot",
                f"Pool '{pool}' would keep {warm} always-warm/business-hours version(s) on every "
                f"engine, leaving no free CPU-cache slot on {', '.join(full)}. Use on_demand or "
                "pinned for some adapters, or ask an operator for engines with more "
                "max_cpu_loras.",
                "warmup_policy",
            )
        ]
    spare = sum(n - warm for n in room.values())
    if pinned <= spare:
        return []
    return [
        Problem(
            "schedule.last_free_slot",
            f"Pool '{pool}' has room for {spare} pinned version(s) beside its {warm} warm "
            f"one(s) while keeping one CPU-cache slot free on every engine; {pinned} are "
            "pinned. Use on_demand for some adapters, or ask an operator for more engines.",
            "warmup_policy",
        )
    ]


def lock_schedule_scope(*, tenant_id: int, pools: Iterable[str]) -> None:
    """Serialise rule checks that count the same tenant or pool (call inside a transaction).

    Order: the tenant, then the pools' engines by id; uploads and the registry lock the tenant
    before an adapter too, so none of them deadlock.
    """
    Tenant.objects.select_for_update().filter(pk=tenant_id).first()
    list(
        Engine.objects.select_for_update()
        .filter(pool__in=sorted(set(pools)))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
