"""Reads: where a budget stands in its current window (settled, held by requests in flight,
what is left, when it starts again, and when it runs out at the rate it is spent)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet

from budgets import clock, state
from budgets.limits import window_limit
from budgets.models import Budget, BudgetSpend, PriceCard
from budgets.windows import Span, window_at
from core.errors import NotFound
from tenants.models import Tenant


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    used: int  # settled tokens this window
    reserved: int  # worst cases held by requests in flight
    remaining: int  # tokens - used - reserved, never below 0
    window_start: datetime
    resets_at: datetime | None  # None: a total budget never resets
    forecast_exhausted_at: datetime | None  # at this window's rate so far; None: not before reset
    limit: int = 0  # the window's ceiling: the budget's tokens, or a raise for this window


def budget_span(budget: Budget, now: datetime | None = None) -> Span:
    return window_at(budget.window, now or clock.now(), budget.tenant.time_zone)


def persisted_spend(budget: Budget, span: Span) -> int:
    row = BudgetSpend.objects.filter(budget=budget, window_start=span.start).first()
    return row.tokens if row else 0


def forecast(*, limit: int, spent: int, span: Span, now: datetime) -> datetime | None:
    """When `spent` reaches `limit` at the window's rate so far; None when it does not before the
    window ends (or nothing was spent yet). Already exhausted: now."""
    if spent >= limit:
        return now
    elapsed = (now - span.start).total_seconds()
    if spent <= 0 or elapsed <= 0:
        return None
    at = now + timedelta(seconds=(limit - spent) * elapsed / spent)
    if span.end is not None and at >= span.end:
        return None
    return at


def budget_status(budget: Budget, now: datetime | None = None) -> BudgetStatus:
    """The budget in its window at `now` (default: the clock): Redis's live counts when Redis
    has them, else the persisted settled spend (nothing reserved)."""
    now = now or clock.now()
    span = budget_span(budget, now)
    live = state.read_counts(budget.id, span)
    if live is None:
        used, reserved = persisted_spend(budget, span), 0
    else:
        used, reserved = live
    spent = used + reserved
    limit = window_limit(budget, span.start)  # the tokens, or a raise for this window
    return BudgetStatus(
        used=used,
        reserved=reserved,
        remaining=max(0, limit - spent),
        window_start=span.start,
        resets_at=span.end,
        forecast_exhausted_at=forecast(limit=limit, spent=spent, span=span, now=now),
        limit=limit,
    )


def budgets_of(*, tenant: Tenant) -> QuerySet[Budget]:
    return Budget.objects.filter(tenant=tenant).select_related("tenant", "created_by")


def budget_get(*, tenant: Tenant, budget_id: str | int) -> Budget:
    """The tenant's budget; 404 for another tenant's or none."""
    try:
        number = int(budget_id)
    except (TypeError, ValueError):
        number = -1
    budget = budgets_of(tenant=tenant).filter(pk=number).first()
    if budget is None:
        raise NotFound("budget.not_found", f"Tenant '{tenant.slug}' has no budget {budget_id}.")
    return budget


def statuses_of(budgets: list[Budget], now: datetime | None = None) -> dict[int, BudgetStatus]:
    now = now or clock.now()
    return {budget.id: budget_status(budget, now) for budget in budgets}


def price_cards() -> QuerySet[PriceCard]:
    return PriceCard.objects.select_related("base_model", "updated_by").order_by("base_model__name")
