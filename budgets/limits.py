"""The ceiling a budget holds in one window: its tokens, or an approved raise for that window
(budgets/raises.py), whichever is higher. Read by the status selector, the alerts and the
gateway's rules, so all three hold a window to the same number."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max

from budgets.models import Budget
from budgets.raise_models import BudgetRaiseRequest, RaiseDuration, RaiseStatus


def window_limit(budget: Budget, window_start: datetime) -> int:
    raised = BudgetRaiseRequest.objects.filter(
        budget=budget,
        status=RaiseStatus.APPROVED,
        duration=RaiseDuration.WINDOW,
        window_start=window_start,
    ).aggregate(top=Max("tokens"))["top"]
    return max(budget.tokens, raised or 0)


def window_raises(now: datetime) -> dict[int, tuple[tuple[int, int], ...]]:
    """budget id -> ((window start in unix seconds, tokens), ...) of the approved window raises
    whose window has not ended at `now`: what the gateway's rules carry."""
    found: dict[int, list[tuple[int, int]]] = {}
    rows = BudgetRaiseRequest.objects.filter(
        status=RaiseStatus.APPROVED, duration=RaiseDuration.WINDOW, window_end__gt=now
    ).values_list("budget_id", "window_start", "tokens")
    for budget_id, start, tokens in rows:
        if start is None:  # an approved window raise always names its window
            continue
        found.setdefault(budget_id, []).append((int(start.timestamp()), int(tokens)))
    return {k: tuple(v) for k, v in found.items()}
