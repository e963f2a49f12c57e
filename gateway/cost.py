"""The cost view: what the shared engines cost over a range of UTC days, against one dedicated
endpoint per active adapter (the seed's comparison), and each tenant's share.

- Engine-hours by pool come from the fleet's own record of up-time (workers.EngineUptime, which
  the prober writes).
- Shares come from the gateway's measurements (gateway.DailyUsage: requests, tokens and
  slot-seconds, the summed end-to-end time of the tenant's requests). A tenant's owners see
  their own figures only: no share of the fleet's (own figure / share would be the fleet's
  total), no other tenant, no pool.
- The dedicated comparison covers the same span as the shared side: the hours inside the range
  when the fleet ran (at least one engine up), not the whole range.
- The price per engine-hour is CostSettings', which platform admins set (audited).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from adapters.models import AdapterVersion, VersionStatus
from core.audit import record_event
from core.errors import ApplicationError
from gateway.models import CostSettings, DailyUsage
from tenants.models import Tenant
from workers.models import EngineUptime

SHARE_FIELDS = ("requests", "prompt_tokens", "completion_tokens", "slot_seconds")
# Fractions of the fleet's totals: for the fleet's readers only.
FLEET_FRACTIONS = ("share_requests", "share_tokens", "share_slot_seconds")


@dataclass
class PoolCost:
    pool: str
    engines: int
    engine_hours: float
    cost: float


@dataclass
class TenantShare:
    tenant: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    slot_seconds: float = 0.0
    share_requests: float = 0.0
    share_tokens: float = 0.0
    share_slot_seconds: float = 0.0
    cost: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class FleetSpan:
    """When the fleet ran inside the range: from its first up-time to its last, and the hours
    at least one engine was up (gaps left out). Both sides of the comparison cover it."""

    start: datetime | None
    end: datetime | None
    hours: float


@dataclass
class Dedicated:
    adapters: int
    endpoints: int
    engine_hours: float
    cost: float
    span_from: str | None
    span_to: str | None
    span_hours: float
    assumptions: list[str]


@dataclass
class CostReport:
    day_from: date
    day_to: date
    hours: float  # of the range, up to now when it ends today
    price_per_engine_hour: float
    currency: str
    pools: list[PoolCost] = field(default_factory=list)
    engine_hours: float = 0.0
    cost: float = 0.0
    dedicated: Dedicated | None = None
    tenants: list[TenantShare] = field(default_factory=list)
    scope: str = "fleet"  # "tenant": the caller sees its own figures only

    def as_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["from"], body["to"] = body.pop("day_from").isoformat(), body.pop("day_to").isoformat()
        for row, share in zip(body["tenants"], self.tenants, strict=True):
            row["tokens"] = share.tokens
            if self.scope != "fleet":
                for name in FLEET_FRACTIONS:
                    del row[name]
        return body


def cost_settings() -> CostSettings:
    return CostSettings.objects.filter(pk=1).first() or CostSettings(pk=1)


def _bounds(day_from: date, day_to: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day_from, time.min, tzinfo=UTC)
    end = min(datetime.combine(day_to + timedelta(days=1), time.min, tzinfo=UTC), timezone.now())
    return start, max(start, end)


def engine_hours_by_pool(
    start: datetime, end: datetime
) -> tuple[dict[str, tuple[int, float]], FleetSpan]:
    """pool -> (engines seen up, hours up inside [start, end)), and when the fleet ran."""
    hours: dict[str, float] = defaultdict(float)
    engines: dict[str, set[int]] = defaultdict(set)
    up: list[tuple[datetime, datetime]] = []
    stretches = EngineUptime.objects.filter(started_at__lt=end, last_seen_at__gt=start)
    for s in stretches.only("engine_id", "pool", "started_at", "last_seen_at"):
        begin, finish = max(s.started_at, start), min(s.last_seen_at, end)
        hours[s.pool] += max(0.0, (finish - begin).total_seconds()) / 3600
        engines[s.pool].add(s.engine_id)
        if finish > begin:
            up.append((begin, finish))
    by_pool = {pool: (len(engines[pool]), hours[pool]) for pool in hours}
    return by_pool, _span(up)


def _span(up: list[tuple[datetime, datetime]]) -> FleetSpan:
    """The union of the up-time stretches (already clipped to the range)."""
    if not up:
        return FleetSpan(None, None, 0.0)
    seconds, covered_to = 0.0, None
    for begin, finish in sorted(up):
        if covered_to is not None and begin < covered_to:
            begin = covered_to
        if finish > begin:
            seconds += (finish - begin).total_seconds()
            covered_to = finish
    return FleetSpan(min(b for b, _ in up), max(f for _, f in up), seconds / 3600)


def _usage(day_from: date, day_to: date, tenant_ids: list[int] | None) -> Any:
    rows = DailyUsage.objects.filter(day__gte=day_from, day__lte=day_to)
    return rows if tenant_ids is None else rows.filter(tenant_id__in=tenant_ids)


def _dedicated(
    day_from: date, day_to: date, span: FleetSpan, range_hours: float, price: float, slots: int
) -> Dedicated:
    """One endpoint per adapter that served in the range or has an active version, running
    while the shared fleet ran (the same span as the shared side), with as many replicas as its
    own slot-seconds need."""
    per_adapter: dict[int, float] = defaultdict(float)
    served = (
        _usage(day_from, day_to, None)
        .filter(version__isnull=False)
        .values("version__adapter_id")
        .annotate(slot_seconds=Sum("slot_seconds"))
    )
    for row in served:
        per_adapter[row["version__adapter_id"]] += row["slot_seconds"] or 0.0
    active = AdapterVersion.objects.filter(status=VersionStatus.ACTIVE).values_list(
        "adapter_id", flat=True
    )
    for adapter_id in active:
        per_adapter.setdefault(adapter_id, 0.0)
    hours = span.hours
    capacity = hours * 3600 * slots  # slot-seconds one endpoint offers over the span
    endpoints = sum(
        max(1, math.ceil(busy / capacity)) if capacity else 1 for busy in per_adapter.values()
    )
    engine_hours = endpoints * hours
    if span.start is None or span.end is None:
        when = f"no engine was up in the range ({range_hours:.2f} h), so neither side counts any"
    else:
        when = (
            f"both sides cover the same span: the {hours:.2f} h the shared fleet ran (at least "
            f"one engine up) between {span.start:%Y-%m-%d %H:%M} and {span.end:%Y-%m-%d %H:%M} "
            f"UTC, of the range's {range_hours:.2f} h"
        )
    return Dedicated(
        adapters=len(per_adapter),
        endpoints=endpoints,
        engine_hours=round(engine_hours, 3),
        cost=round(engine_hours * price, 2),
        span_from=span.start.isoformat() if span.start else None,
        span_to=span.end.isoformat() if span.end else None,
        span_hours=round(hours, 3),
        assumptions=[
            "one endpoint per adapter that served a request in the range or has an active "
            "version, each a merged model on an engine like the shared ones, at the same price "
            "per engine-hour",
            when,
            "each endpoint runs the whole span: scaling to zero would make its first request "
            "wait for a model load, which the shared engines avoid",
            f"an endpoint serves {slots} requests at once; an adapter whose slot-seconds exceed "
            "one endpoint's over the span gets more (none needs fewer than one)",
        ],
    )


def _shares(rows: Any, total_cost: float) -> list[TenantShare]:
    by_tenant = rows.values("tenant__slug").annotate(**{name: Sum(name) for name in SHARE_FIELDS})
    shares = [
        TenantShare(tenant=r["tenant__slug"], **{name: r[name] or 0 for name in SHARE_FIELDS})
        for r in by_tenant.order_by("tenant__slug")
    ]
    requests = sum(s.requests for s in shares)
    tokens = sum(s.tokens for s in shares)
    slot_seconds = sum(s.slot_seconds for s in shares)
    for s in shares:
        s.slot_seconds = round(s.slot_seconds, 3)
        s.share_requests = round(s.requests / requests, 4) if requests else 0.0
        s.share_tokens = round(s.tokens / tokens, 4) if tokens else 0.0
        s.share_slot_seconds = round(s.slot_seconds / slot_seconds, 4) if slot_seconds else 0.0
        # The engines are shared by time held, so their cost is too.
        s.cost = round(total_cost * s.share_slot_seconds, 2)
    return shares


def cost_report(*, access: Any, day_from: date, day_to: date, tenant: Tenant | None) -> CostReport:
    """The fleet's numbers for platform admins and auditors; a tenant's owners get their own
    figures only: requests, tokens, slot-seconds and the cost they are charged, no fraction of
    the fleet's totals (adapters/access.py)."""
    reach = access.cost_tenant_reach(tenant)
    prices = cost_settings()
    price = float(prices.price_per_engine_hour)
    start, end = _bounds(day_from, day_to)
    hours = (end - start).total_seconds() / 3600
    report = CostReport(day_from, day_to, round(hours, 3), price, prices.currency)
    by_pool, span = engine_hours_by_pool(start, end)
    for pool, (engines, pool_hours) in sorted(by_pool.items()):
        report.pools.append(
            PoolCost(pool, engines, round(pool_hours, 3), round(pool_hours * price, 2))
        )
    report.engine_hours = round(sum(p.engine_hours for p in report.pools), 3)
    report.cost = round(sum(p.cost for p in report.pools), 2)  # the pools add up on the page
    shares = _shares(_usage(day_from, day_to, None), report.cost)
    if reach is None:
        report.dedicated = _dedicated(day_from, day_to, span, hours, price, prices.dedicated_slots)
    else:
        report.pools, report.engine_hours, report.cost = [], 0.0, 0.0
    wanted = None if tenant is None else tenant.slug
    report.tenants = [s for s in shares if wanted is None or s.tenant == wanted]
    if not access.may_read_cost(None):
        report.scope = "tenant"  # as_dict leaves the fractions out; so does the page
    return report


def cost_settings_update(
    *,
    access: Any,
    price_per_engine_hour: Any,
    currency: str,
    dedicated_slots: Any,
    request_id: str = "",
) -> CostSettings:
    """Platform admins set the price (audited as `cost.settings`)."""
    access.require_platform_change("the price per engine-hour", code="cost.not_allowed")
    try:
        price = Decimal(str(price_per_engine_hour)).quantize(Decimal("0.0001"))
        slots = int(dedicated_slots)
    except (ArithmeticError, ValueError, TypeError):
        raise ApplicationError(
            "cost.bad_settings",
            "price_per_engine_hour must be a number, dedicated_slots an integer.",
        ) from None
    currency = (currency or "").strip().upper()
    if not price.is_finite() or price < 0 or price >= Decimal("1000000"):
        raise ApplicationError("cost.bad_settings", "price_per_engine_hour must be 0 to 999999.")
    if not (1 <= slots <= 1024) or len(currency) != 3 or not currency.isalpha():
        raise ApplicationError(
            "cost.bad_settings", "dedicated_slots must be 1-1024; currency a 3-letter code (USD)."
        )
    with transaction.atomic():
        row = CostSettings.objects.select_for_update().filter(pk=1).first() or CostSettings(pk=1)
        before = {
            "price_per_engine_hour": str(row.price_per_engine_hour),
            "currency": row.currency,
            "dedicated_slots": row.dedicated_slots,
        }
        row.price_per_engine_hour, row.currency, row.dedicated_slots = price, currency, slots
        row.updated_by, row.updated_at = access.user, timezone.now()
        row.save()
        record_event(
            action="cost.settings",
            actor=access.user,
            object_type="gateway.costsettings",
            object_id="1",
            before=before,
            after={
                "price_per_engine_hour": str(price),
                "currency": currency,
                "dedicated_slots": slots,
            },
            request_id=request_id,
        )
    return row
