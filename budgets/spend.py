"""The settled spend in the database (BudgetSpend): added to in batches by the gateway before
each settle reaches Redis, and by the reaper's notes; what the rebuild reads."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection, transaction
from django.utils import timezone

from budgets.models import Budget, BudgetSpend

# (budget id, window start in unix seconds) -> tokens
SpendBatch = dict[tuple[int, int], int]


def add_spend(batch: SpendBatch) -> int:
    """Add each window's tokens to its row (created at 0), in one transaction; rows of budgets
    deleted meanwhile are skipped. A negative amount (the reaper's notes: a reaped request's own
    settle, persisted before, counted twice) takes an existing row back, never below 0. How many
    rows it touched."""
    batch = {k: v for k, v in batch.items() if v != 0}
    if not batch:
        return 0
    alive = set(Budget.objects.filter(id__in={b for b, _ in batch}).values_list("id", flat=True))
    now = timezone.now()
    rows = [
        (budget_id, datetime.fromtimestamp(start, UTC), tokens, now)
        for (budget_id, start), tokens in sorted(batch.items())
        if budget_id in alive
    ]
    table = BudgetSpend._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        if added := [row for row in rows if row[2] > 0]:
            cursor.executemany(
                f"INSERT INTO {table} (budget_id, window_start, tokens, updated_at) "  # noqa: S608
                "VALUES (%s, %s, %s, %s) ON CONFLICT (budget_id, window_start) DO UPDATE SET "
                f"tokens = {table}.tokens + EXCLUDED.tokens, updated_at = EXCLUDED.updated_at",
                added,
            )
        if taken := [(tokens, now, b, start) for b, start, tokens, now in rows if tokens < 0]:
            cursor.executemany(
                f"UPDATE {table} SET tokens = GREATEST(0, tokens + %s), "  # noqa: S608
                "updated_at = %s WHERE budget_id = %s AND window_start = %s",
                taken,
            )
    return len(rows)
