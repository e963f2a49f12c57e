"""Pruning what budgets leave behind: burn-down samples and delivered notifications older than
BUDGET_HISTORY_RETENTION_DAYS. A budget alert's notification is its claim on being told once
per threshold per window (the unique key), so none of a window still running is pruned, however
old (a `total` window never ends)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from budgets.models import Budget, BudgetSample
from budgets.selectors import budget_span
from tenants.notifications.models import DeliveryStatus, Notification

BATCH = 1000


def running_alert_prefixes(now: datetime) -> tuple[str, ...]:
    """The key prefix of every budget's alerts in its window at `now`."""
    budgets = Budget.objects.select_related("tenant")
    return tuple(f"budget:{b.id}:{int(budget_span(b, now).start.timestamp())}:" for b in budgets)


def prune_history(now: datetime | None = None) -> tuple[int, int]:
    """(samples, notifications) deleted: older than the retention, and for a notification
    every delivery delivered and no running window's alert."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.BUDGET_HISTORY_RETENTION_DAYS)
    samples, _ = BudgetSample.objects.filter(at__lt=cutoff).delete()
    keep = running_alert_prefixes(now)
    old = (
        Notification.objects.filter(created_at__lt=cutoff)
        .exclude(deliveries__status__in=[DeliveryStatus.PENDING, DeliveryStatus.FAILED])
        .values_list("id", "key")
    )
    ids = [pk for pk, key in old.iterator() if not key.startswith(keep)]
    notifications = 0
    for start in range(0, len(ids), BATCH):
        found = Notification.objects.filter(pk__in=ids[start : start + BATCH])
        notifications += found.count()
        found.delete()
    return samples, notifications
