"""Warnings before the stop: each threshold a budget crosses in a window is told to its tenant
once (tenants.notifications.notify, keyed `budget:<id>:<window start>:<threshold>`), so a loop
that runs every few seconds, on many workers, after any restart, sends each alert once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from budgets import clock
from budgets.models import Budget, BudgetSample
from budgets.selectors import BudgetStatus, budget_status
from tenants.notifications.models import Notification
from tenants.notifications.services import notify

# The burn-down chart's resolution (budgets' samples, written by this loop).
SAMPLES_PER_WINDOW = 500


@dataclass(frozen=True)
class Alert:
    budget: Budget
    threshold: int
    status: BudgetStatus
    limit: int

    @property
    def key(self) -> str:
        return alert_key(self.budget.id, self.status.window_start, self.threshold)


def alert_key(budget_id: int, window_start: datetime, threshold: int) -> str:
    return f"budget:{budget_id}:{int(window_start.timestamp())}:{threshold}"


def budget_limit(budget: Budget, status: BudgetStatus) -> int:
    """The ceiling the window is held to: the budget's tokens, or a raise for this window."""
    from budgets.raises import window_limit

    return window_limit(budget, status.window_start)


def crossed(budget: Budget, status: BudgetStatus, limit: int) -> list[int]:
    """The thresholds (percent) the settled spend has reached in the window, lowest first."""
    thresholds = sorted({int(t) for t in budget.thresholds if 0 < int(t) <= 1000})
    return [t for t in thresholds if status.used * 100 >= t * limit]


def _local(at: datetime | None, zone: str) -> str:
    if at is None:
        return "never"
    return at.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def alert_text(alert: Alert) -> tuple[str, str, dict]:
    budget, status, limit = alert.budget, alert.status, alert.limit
    zone = budget.tenant.time_zone
    percent = status.used * 100 // max(1, limit)
    subject = f"Budget '{budget.scope}' ({budget.window}) at {alert.threshold}%"
    lines = [
        f"Tenant {budget.tenant.slug}: the {budget.window} budget of scope '{budget.scope}' has "
        f"used {status.used:,} of {limit:,} tokens ({percent}%), crossing {alert.threshold}%.",
        f"Held by requests in flight: {status.reserved:,}; left: {status.remaining:,}.",
        "It resets at " + _local(status.resets_at, zone) + "."
        if status.resets_at
        else "It is a total budget: it does not reset.",
    ]
    if status.forecast_exhausted_at is not None:
        lines.append(
            "At the rate spent so far it runs out at "
            + _local(status.forecast_exhausted_at, zone)
            + "."
        )
    else:
        lines.append("At the rate spent so far it lasts to the end of the window.")
    if alert.threshold >= 100:
        lines.append("Requests that do not fit are refused (429 budget_exceeded) until then.")
    data = {
        "budget": budget.id,
        "scope": budget.scope,
        "window": budget.window,
        "threshold": alert.threshold,
        "used": status.used,
        "reserved": status.reserved,
        "limit": limit,
        "remaining": status.remaining,
        "window_start": status.window_start.isoformat(),
        "resets_at": status.resets_at.isoformat() if status.resets_at else None,
        "forecast_exhausted_at": (
            status.forecast_exhausted_at.isoformat() if status.forecast_exhausted_at else None
        ),
    }
    return subject, "\n".join(lines), data


def sample_interval(status: BudgetStatus) -> float:
    """Seconds between two burn-down samples: about SAMPLES_PER_WINDOW to a window (a day's
    every ~3 minutes, a month's every ~1.5 hours), never closer than a minute."""
    if status.resets_at is None:
        return 6 * 3600.0
    length = (status.resets_at - status.window_start).total_seconds()
    return max(60.0, length / SAMPLES_PER_WINDOW)


def _sample(budget: Budget, status: BudgetStatus, limit: int, now: datetime) -> None:
    """A point of the burn-down chart, when the last one of this window is older than the
    interval (and, while nothing moves, than five of them)."""
    last = (
        BudgetSample.objects.filter(budget=budget, window_start=status.window_start)
        .order_by("-at")
        .values_list("at", "used", "limit")
        .first()
    )
    if last is not None:
        since = (now - last[0]).total_seconds()
        quiet = (last[1], last[2]) == (status.used, limit)
        if since < sample_interval(status) * (5 if quiet else 1):
            return
    BudgetSample.objects.create(
        budget=budget, window_start=status.window_start, at=now, used=status.used, limit=limit
    )


def due_alerts(now: datetime | None = None) -> list[Alert]:
    """Every threshold crossed in its budget's current window and not yet told (and, on the way,
    a burn-down sample of every budget)."""
    now = now or clock.now()
    candidates: list[Alert] = []
    for budget in Budget.objects.select_related("tenant").order_by("id"):
        status = budget_status(budget, now)
        limit = budget_limit(budget, status)
        _sample(budget, status, limit, now)
        candidates += [Alert(budget, t, status, limit) for t in crossed(budget, status, limit)]
    if not candidates:
        return []
    told = set(
        Notification.objects.filter(key__in=[a.key for a in candidates]).values_list(
            "tenant_id", "key"
        )
    )
    return [a for a in candidates if (a.budget.tenant_id, a.key) not in told]


def send_budget_alerts(now: datetime | None = None) -> int:
    """One pass of the loop: how many alerts it sent (the others were sent before)."""
    sent = 0
    for alert in due_alerts(now):
        subject, body, data = alert_text(alert)
        if notify(tenant=alert.budget.tenant, key=alert.key, subject=subject, body=body, data=data):
            sent += 1
    return sent
