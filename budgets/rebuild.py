"""Budgets' counts in Redis rebuilt from the persisted spend, never from zero.

A Redis that restarted empty has lost the ready marker (keys.BUDGETS_READY) with every count, so
the gateway's admission refuses every request under a budget (503 budget_unavailable) until
`rebuild_counts` has written each budget's current window from BudgetSpend and set the marker,
all in one transaction. The gateway runs it from its lease beat (gateway.replicas) and at once
when an admission finds the marker gone. `persist_reaped` folds the reaper's notes (the worst
cases of a dead replica's requests, settled in Redis, less what those requests' own settles had
persisted when their replica was only late: budget_settle.lua) into BudgetSpend.
"""

from __future__ import annotations

import logging
from datetime import datetime

import redis

from budgets import clock
from budgets.models import Budget, BudgetSpend
from budgets.spend import add_spend
from budgets.windows import Span, window_at
from workers import fleet_redis
from workers.redis_contract.keys import BUDGETS_READY, BUDGETS_REAPED, budget_key

log = logging.getLogger(__name__)

LOCK_KEY = "lp:gw:budgets:rebuild-lock"
LOCK_S = 60
# A window's hash outlives its window by this much (a request admitted at its end settles in it).
EXPIRE_AFTER_S = 2 * 86400


def expire_at(span: Span) -> int:
    """When a window's hash may go (unix seconds); 0 for a total window (never)."""
    return 0 if span.end is None else int(span.end.timestamp()) + EXPIRE_AFTER_S


def parse_budget_key(key: str) -> tuple[int, int] | None:
    """(budget id, window start) from a window hash's key, or None."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return int(parts[1]), int(parts[2])


def persist_reaped(client: redis.Redis | None = None) -> int:
    """Move the reaper's notes into BudgetSpend; how many windows it wrote."""
    client = client or fleet_redis.client()
    raw = client.hgetall(BUDGETS_REAPED)
    batch: dict[tuple[int, int], int] = {}
    for key, value in raw.items():
        parsed = parse_budget_key(key.decode() if isinstance(key, bytes) else key)
        if parsed is not None:
            batch[parsed] = batch.get(parsed, 0) + int(value)
    if not batch:
        return 0
    written = add_spend(batch)
    pipe = client.pipeline(transaction=True)
    for key, value in raw.items():
        pipe.hincrby(BUDGETS_REAPED, key, -int(value))
    pipe.execute()
    return written


def ready(client: redis.Redis | None = None) -> bool:
    return bool((client or fleet_redis.client()).exists(BUDGETS_READY))


def rebuild_counts(client: redis.Redis | None = None, now: datetime | None = None) -> int | None:
    """Write every budget's current window (settled spend from the database, nothing reserved)
    and set the ready marker, in one transaction; None when another process holds the rebuild or
    the marker is there already. How many windows it wrote."""
    client = client or fleet_redis.client()
    if client.exists(BUDGETS_READY):
        return None
    if not client.set(LOCK_KEY, "1", nx=True, ex=LOCK_S):
        return None
    try:
        now = now or clock.now()
        budgets = list(Budget.objects.select_related("tenant"))
        spans = {b.id: window_at(b.window, now, b.tenant.time_zone) for b in budgets}
        persisted = {
            (row.budget_id, int(row.window_start.timestamp())): row.tokens
            for row in BudgetSpend.objects.filter(budget__in=budgets)
        }
        pipe = client.pipeline(transaction=True)
        for budget in budgets:
            span = spans[budget.id]
            key = budget_key(budget.id, span.key)
            pipe.delete(key)
            pipe.hset(key, mapping={"used": persisted.get((budget.id, span.key), 0), "reserved": 0})
            if (at := expire_at(span)) > 0:
                pipe.expireat(key, at)
        pipe.set(BUDGETS_READY, str(int(now.timestamp())))
        pipe.execute()
        log.warning("budgets: counts rebuilt from the persisted spend (%d windows)", len(budgets))
        return len(budgets)
    finally:
        client.delete(LOCK_KEY)
