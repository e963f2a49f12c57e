"""What the budgets pages show of each budget: where it stands, its burn-down this window (the
samples the alert loop keeps), the alerts told in this window, its raise requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from budgets import clock
from budgets.alerts import budget_limit
from budgets.models import Budget, BudgetSample
from budgets.money import BudgetMoney, money_of_budgets
from budgets.raise_models import BudgetRaiseRequest, RaiseStatus
from budgets.selectors import BudgetStatus, budget_status
from budgets.services.budgets import BudgetRights
from tenants.notifications.models import Notification


@dataclass
class BudgetView:
    budget: Budget
    status: BudgetStatus
    limit: int
    alerts: list[Notification] = field(default_factory=list)
    raises: list[BudgetRaiseRequest] = field(default_factory=list)
    chart: dict[str, Any] = field(default_factory=dict)
    money: BudgetMoney | None = None  # beside the tokens, from the base model's price card
    # What the viewer may do to it (budgets.services.budgets.budget_rights); None: nothing here.
    rights: BudgetRights | None = None

    @property
    def chart_id(self) -> str:
        return f"burn-down-{self.budget.id}"

    @property
    def used_percent(self) -> int:
        return min(100, self.status.used * 100 // max(1, self.limit))

    @property
    def pending_raise(self) -> BudgetRaiseRequest | None:
        return next((r for r in self.raises if r.status == RaiseStatus.PENDING), None)


def burn_down(budget: Budget, status: BudgetStatus, limit: int, now: datetime) -> dict[str, Any]:
    """The chart's series in unix seconds: what was left at each sample and now, and the forecast
    from now to the moment it runs out (or to the window's end)."""
    samples = BudgetSample.objects.filter(
        budget=budget, window_start=status.window_start
    ).values_list("at", "used", "limit")
    points = [(status.window_start.timestamp(), limit)]
    points += [(at.timestamp(), max(0, lim - used)) for at, used, lim in samples]
    points.append((now.timestamp(), max(0, limit - status.used)))
    forecast: list[tuple[float, float]] = []
    if status.forecast_exhausted_at is not None:
        forecast = [
            (now.timestamp(), max(0, limit - status.used)),
            (status.forecast_exhausted_at.timestamp(), 0),
        ]
    end = status.resets_at.timestamp() if status.resets_at else None
    return {
        "left": sorted(points),
        "forecast": forecast,
        "end": end,
        "limit": limit,
    }


def budget_views(budgets: list[Budget], now: datetime | None = None) -> list[BudgetView]:
    now = now or clock.now()
    statuses = {budget.id: budget_status(budget, now) for budget in budgets}
    money = money_of_budgets(budgets, statuses)
    views = []
    for budget in budgets:
        status = statuses[budget.id]
        limit = budget_limit(budget, status)
        prefix = f"budget:{budget.id}:{int(status.window_start.timestamp())}:"
        views.append(
            BudgetView(
                budget=budget,
                status=status,
                limit=limit,
                alerts=list(
                    Notification.objects.filter(
                        tenant_id=budget.tenant_id, key__startswith=prefix
                    ).order_by("created_at")
                ),
                raises=list(
                    BudgetRaiseRequest.objects.filter(budget=budget)
                    .select_related("requested_by", "decided_by")
                    .order_by("-requested_at")[:5]
                ),
                chart=burn_down(budget, status, limit, now),
                money=money[budget.id],
            )
        )
    return views


def pending_raises() -> list[BudgetRaiseRequest]:
    return list(
        BudgetRaiseRequest.objects.filter(status=RaiseStatus.PENDING)
        .select_related("tenant", "budget", "requested_by")
        .order_by("requested_at")
    )
