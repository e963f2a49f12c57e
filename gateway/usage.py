"""Chargeback: the gateway's daily usage totals in Redis (`lp:usage:<day>`), persisted to DailyUsage.

Each run sets the rows to the Redis totals (they only grow during a day), so running it again,
late or twice is harmless. A row is never lowered: Redis losing its keys (restart without
persistence, flush) must not erase usage already persisted.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import redis
from django.db import transaction

from adapters.models import AdapterVersion
from gateway.models import DailyUsage
from tenants.models import Tenant
from workers import shared_state

log = logging.getLogger(__name__)

SHADOW_PREFIX = "shadow_"

USAGE_FIELDS = {
    "requests": "requests",
    "in": "prompt_tokens",
    "out": "completion_tokens",
    # Of those, what release plans' shadow pairs asked (evals.services.shadow_pairs writes them
    # beside the recorder's own fields): the tenant's usage all the same, labelled `shadow`.
    SHADOW_PREFIX + "requests": "shadow_requests",
    SHADOW_PREFIX + "in": "shadow_prompt_tokens",
    SHADOW_PREFIX + "out": "shadow_completion_tokens",
}
# Summed end-to-end milliseconds (a float in Redis), kept as slot-seconds.
SLOT_MS_FIELD = "e2e_ms_sum"
PERSISTED_FIELDS = [*USAGE_FIELDS.values(), "slot_seconds"]
LOCK_KEY = "lp:usage:persist-lock"
LOCK_LEASE_S = 300
# (tenant_id, version_id or None for the base model, service class) -> {model field: total}
UsageKey = tuple[int, int | None, str]
Totals = dict[UsageKey, dict[str, float]]


def usage_key(day: date) -> str:
    return f"lp:usage:{day.isoformat()}"


def parse_usage(raw: dict[bytes, bytes]) -> Totals:
    """Fields `tenant_id|version_id|class|requests|in|out|e2e_ms_sum` (version 0: the base model;
    a field without the class part is a request of no class, ''), and
    `shadow_requests|shadow_in|shadow_out` for the part of them shadow pairs asked."""
    totals: Totals = defaultdict(lambda: dict.fromkeys(PERSISTED_FIELDS, 0))
    for name, value in raw.items():
        parts = name.decode().split("|")
        if len(parts) == 3:
            parts.insert(2, "")
        known = parts[-1] in USAGE_FIELDS or parts[-1] == SLOT_MS_FIELD
        if len(parts) != 4 or not known or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        key = (int(parts[0]), int(parts[1]) or None, parts[2][:32])
        if parts[3] == SLOT_MS_FIELD:
            totals[key]["slot_seconds"] += round(float(value) / 1000, 3)
        else:
            totals[key][USAGE_FIELDS[parts[3]]] += int(value)
    return dict(totals)


@dataclass
class PersistReport:
    days: list[str] = field(default_factory=list)
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: int = 0  # tenant or version no longer exists, or the version is another tenant's
    locked: bool = False  # another run held the lock; this one did nothing


def _valid_keys(totals: Totals) -> set[UsageKey]:
    tenant_ids = set(
        Tenant.objects.filter(id__in={t for t, _, _ in totals}).values_list("id", flat=True)
    )
    version_owner = dict(
        AdapterVersion.objects.filter(id__in={v for _, v, _ in totals if v}).values_list(
            "id", "tenant_id"
        )
    )
    return {
        (t, v, c)
        for t, v, c in totals
        if t in tenant_ids and (v is None or version_owner.get(v) == t)
    }


def usage_persist_day(*, day: date, totals: Totals, report: PersistReport) -> None:
    """Make the day's rows equal the totals (never lower); constant queries per day."""
    valid = _valid_keys(totals)
    report.skipped += len(totals) - len(valid)
    if not valid:
        return
    with transaction.atomic():
        existing = {
            (row.tenant_id, row.version_id, row.service_class): row
            for row in DailyUsage.objects.select_for_update().filter(
                day=day, tenant_id__in={t for t, _, _ in valid}
            )
        }
        create, update = [], []
        for key in sorted(valid, key=lambda k: (k[0], k[1] or 0, k[2])):
            wanted = totals[key]
            row = existing.get(key)
            if row is None:
                create.append(
                    DailyUsage(
                        tenant_id=key[0], version_id=key[1], service_class=key[2], day=day, **wanted
                    )
                )
                continue
            merged = {name: max(getattr(row, name), value) for name, value in wanted.items()}
            if all(getattr(row, name) == value for name, value in merged.items()):
                report.unchanged += 1
                continue
            for name, value in merged.items():
                setattr(row, name, value)
            update.append(row)
        DailyUsage.objects.bulk_create(create)
        DailyUsage.objects.bulk_update(update, PERSISTED_FIELDS)
    report.created += len(create)
    report.updated += len(update)


def usage_persist(
    *, days: int = 2, today: date | None = None, client: redis.Redis | None = None
) -> PersistReport:
    """Persist today's and the previous `days - 1` days' totals (UTC days, as the recorder keys
    them). One run at a time: base-model rows (no version) have no unique constraint to lean on."""
    client = client or shared_state.client()
    today = today or datetime.now(UTC).date()
    report = PersistReport()
    lock = client.lock(LOCK_KEY, timeout=LOCK_LEASE_S, blocking=False)
    if not lock.acquire():
        report.locked = True
        return report
    try:
        wanted = [today - timedelta(days=back) for back in range(days)]
        pipe = client.pipeline(transaction=False)
        for day in wanted:
            pipe.hgetall(usage_key(day))
        for day, raw in zip(wanted, pipe.execute(), strict=True):
            if not raw:
                continue  # nothing recorded (or expired): leave persisted rows as they are
            report.days.append(day.isoformat())
            usage_persist_day(day=day, totals=parse_usage(raw), report=report)
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            log.warning("usage persist outlived its lock lease (%s s)", LOCK_LEASE_S)
    return report


def require_usage_reader(access: Any, tenant: Tenant) -> None:
    """Usage is billing data; who reads it is adapters/access.py's rule (pages and API ask here)."""
    access.require_usage_reader(tenant)


def may_read_usage(access: Any, tenant: Tenant) -> bool:
    return access.may_read_usage(tenant)
