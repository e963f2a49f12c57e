"""Pruning budgets' history: burn-down samples and delivered notifications past the retention go;
recent ones, undelivered ones and the alerts of a window still running stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from budgets.models import Budget, BudgetSample
from budgets.retention import prune_history
from budgets.selectors import budget_span
from budgets.tasks import prune_budget_history
from tenants.notifications.models import (
    Delivery,
    DeliveryStatus,
    Notification,
    WebhookEndpoint,
)
from tests.factories import build_world

pytestmark = pytest.mark.django_db


def _notice(world, key: str, age_days: int, *statuses: str) -> Notification:
    made = Notification.objects.create(
        tenant=world.acme,
        key=key,
        subject=key,
        body="-",
        created_at=timezone.now() - timedelta(days=age_days),
    )
    for i, status in enumerate(statuses):  # an e-mail, then webhooks
        hook = None
        if i:
            hook, _ = WebhookEndpoint.objects.get_or_create(
                tenant=world.acme,
                name=f"hook-{i}",
                defaults={"url": "https://hooks.example.com/", "secret_sealed": "-"},
            )
        Delivery.objects.create(
            tenant=world.acme,
            notification=made,
            channel="webhook" if hook else "email",
            webhook=hook,
            status=status,
        )
    return made


def test_what_is_past_the_retention_is_pruned(settings):
    settings.BUDGET_HISTORY_RETENTION_DAYS = 40
    world = build_world()
    now = timezone.now()
    month = Budget.objects.create(tenant=world.acme, scope="tenant", tokens=10, window="month")
    total = Budget.objects.create(tenant=world.acme, scope="alias:x", tokens=10, window="total")
    for budget, age in ((month, 50), (month, 10)):
        at = now - timedelta(days=age)
        BudgetSample.objects.create(
            budget=budget, window_start=budget_span(budget, at).start, at=at, used=1, limit=10
        )
    delivered = DeliveryStatus.DELIVERED
    gone = _notice(world, "old-delivered", 50, delivered, delivered)
    _notice(world, "old-pending", 50, delivered, DeliveryStatus.PENDING)
    _notice(world, "old-failed", 50, DeliveryStatus.FAILED)
    _notice(world, "recent", 10, delivered)
    # A total window never ends: its alert is what keeps it from being told twice.
    start = int(budget_span(total, now).start.timestamp())
    _notice(world, f"budget:{total.id}:{start}:50", 50, delivered)
    ended = _notice(world, f"budget:{month.id}:1000:50", 50, delivered)  # a window long over

    assert prune_history(now) == (1, 2)
    assert list(BudgetSample.objects.values_list("budget_id", flat=True)) == [month.id]
    left = set(Notification.objects.values_list("key", flat=True))
    assert left == {"old-pending", "old-failed", "recent", f"budget:{total.id}:{start}:50"}
    assert gone.key not in left and ended.key not in left
    assert not Delivery.objects.filter(notification_id=gone.pk).exists()
    assert prune_budget_history() == 0  # the beat task: nothing more to prune


def test_the_beat_schedule_prunes_hourly(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["prune-budget-history"]
    assert entry["task"] == "budgets.tasks.prune_budget_history"
