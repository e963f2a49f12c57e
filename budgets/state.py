"""Budgets' live counts in Redis (workers.redis_contract.keys.budget_key): read here for the
selectors and the rebuild; the gateway's admission and settle write them through the contract's
scripts."""

from __future__ import annotations

import redis

from budgets.windows import Span
from workers import fleet_redis
from workers.redis_contract.keys import budget_key


def read_counts(budget_id: int, span: Span) -> tuple[int, int] | None:
    """(settled, reserved) of the budget's window in Redis; None when Redis has no count for it
    (never written, or lost) or does not answer."""
    try:
        raw = fleet_redis.client().hmget(budget_key(budget_id, span.key), ["used", "reserved"])
    except redis.RedisError:
        return None
    if raw[0] is None and raw[1] is None:
        return None
    return int(raw[0] or 0), max(0, int(raw[1] or 0))
