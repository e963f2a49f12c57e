"""Spend on a budget as the gateway leaves it: settled tokens persisted (budgets.spend) and the
window's count in Redis rebuilt from them (budgets.rebuild)."""

from __future__ import annotations

from datetime import datetime

from budgets.models import Budget
from budgets.rebuild import rebuild_counts
from budgets.selectors import budget_span
from budgets.spend import add_spend
from workers import fleet_redis
from workers.redis_contract.keys import BUDGETS_READY, budget_key


def spend(budget: Budget, tokens: int, now: datetime) -> None:
    span = budget_span(budget, now)
    add_spend({(budget.id, span.key): tokens})
    client = fleet_redis.client()
    client.delete(BUDGETS_READY)
    rebuild_counts(client, now)


def clear_budget_counts() -> None:
    """Budget ids start again with every test database, so one run's counts in Redis would be
    read as the next run's: tests that spend start with none."""
    client = fleet_redis.client()
    pattern = budget_key(0, 0).rsplit(":", 2)[0] + ":*"
    for key in client.scan_iter(match=pattern, count=500):
        client.delete(key)
    client.delete(BUDGETS_READY)
