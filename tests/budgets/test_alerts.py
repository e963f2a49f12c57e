"""Threshold alerts: each threshold crossed in a window is told once, by notice, e-mail and
webhook, however often the loop runs; a new window starts the count again."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from budgets.alerts import alert_key, send_budget_alerts
from budgets.models import Budget
from budgets.selectors import budget_span
from tenants.notifications.models import Notification
from tests.budgets.spending import clear_budget_counts, spend

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def no_budget_counts():
    clear_budget_counts()


@pytest.fixture
def budget(world):
    world.acme.time_zone = "Europe/Paris"
    world.acme.save()
    return Budget.objects.create(
        tenant=world.acme, scope="tenant", tokens=1000, window="month", thresholds=[50, 80, 100]
    )


def _subjects(tenant):
    return [n.subject for n in Notification.objects.filter(tenant=tenant).order_by("id")]


def test_each_threshold_is_told_once_per_window(budget):
    spend(budget, 400, NOW)
    assert send_budget_alerts(NOW) == 0
    spend(budget, 150, NOW)
    assert send_budget_alerts(NOW) == 1
    assert send_budget_alerts(NOW + timedelta(seconds=30)) == 0  # the loop again: nothing new
    spend(budget, 300, NOW)
    assert send_budget_alerts(NOW) == 1
    assert _subjects(budget.tenant) == [
        "Budget 'tenant' (month) at 50%",
        "Budget 'tenant' (month) at 80%",
    ]
    start = budget_span(budget, NOW).start
    assert start == datetime(2026, 11, 30, 23, 0, tzinfo=UTC)  # 1 December, midnight in Paris
    told = Notification.objects.get(key=alert_key(budget.id, start, 80))
    assert told.key == f"budget:{budget.id}:{int(start.timestamp())}:80"
    assert "used 850 of 1,000 tokens (85%)" in told.body
    assert "It resets at 2027-01-01 00:00 CET." in told.body
    # 850 in 9.54 days (from 30 Nov 23:00 UTC): 150 more in 1.68 days
    assert "runs out at 2026-12-12 05:24 CET." in told.body
    assert told.data["resets_at"] == "2026-12-31T23:00:00+00:00"
    assert told.data["forecast_exhausted_at"].startswith("2026-12-12T04:24")


def test_crossing_two_thresholds_at_once_tells_both(budget):
    spend(budget, 1000, NOW)
    assert send_budget_alerts(NOW) == 3
    assert [n.data["threshold"] for n in Notification.objects.order_by("id")] == [50, 80, 100]
    hundred = Notification.objects.get(data__threshold=100)
    assert "refused (429 budget_exceeded)" in hundred.body


def test_the_next_window_starts_again(budget):
    spend(budget, 600, NOW)
    assert send_budget_alerts(NOW) == 1
    january = NOW + timedelta(days=31)
    assert send_budget_alerts(january) == 0  # a new window: nothing spent in it yet
    spend(budget, 600, january)
    assert send_budget_alerts(january) == 1
    assert send_budget_alerts(NOW) == 0  # December's was told already
    keys = sorted(Notification.objects.values_list("key", flat=True))
    assert len(keys) == 2 and keys[0] != keys[1]


def test_an_approved_raise_moves_the_thresholds(budget, world):
    from adapters.access import AccessContext
    from budgets.raises import raise_request_approve, raise_request_create

    spend(budget, 600, NOW)
    assert send_budget_alerts(NOW) == 1  # 60% of 1000
    asked = raise_request_create(
        access=AccessContext.for_user(world.users["alice"]),
        budget=budget,
        tokens=2000,
        duration="window",
        reason="launch week",
    )
    raise_request_approve(access=AccessContext.for_user(world.users["adam"]), raise_request=asked)
    spend(budget, 400, NOW)  # 1000 of 2000 now: 50%, told already; not 100%
    assert send_budget_alerts(NOW) == 0


@pytest.mark.django_db(transaction=True)
def test_several_workers_at_once_send_each_alert_once(settings):
    from tests.factories import build_world

    settings.ADAPTER_STORAGE_BACKEND = "local"
    world = build_world()
    budget = Budget.objects.create(
        tenant=world.acme, scope="tenant", tokens=100, window="day", thresholds=[50, 80, 100]
    )
    spend(budget, 100, NOW)
    barrier = threading.Barrier(4)
    sent: list[int] = []

    def loop() -> None:
        from django.db import connection

        barrier.wait()
        try:
            sent.append(send_budget_alerts(NOW))
        finally:
            connection.close()

    threads = [threading.Thread(target=loop) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(sent) == 3
    assert Notification.objects.count() == 3


def test_alerts_arrive_by_email_and_webhook_once(
    budget, world, settings, smtp_server, receiver, eager_tasks, django_capture_on_commit_callbacks
):
    from adapters.access import AccessContext
    from tenants.notifications.services import webhook_create

    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    world.users["alice"].email = "alice@acme.test"
    world.users["alice"].save()
    webhook_create(
        access=AccessContext.for_user(world.users["alice"]),
        tenant=world.acme,
        name="ops",
        url=receiver.url,
    )
    spend(budget, 820, NOW)
    for _ in range(3):
        with django_capture_on_commit_callbacks(execute=True):
            send_budget_alerts(NOW)
    assert len(smtp_server.mails) == 2 and len(receiver.posts) == 2
    import json

    thresholds = sorted(json.loads(p.body)["data"]["threshold"] for p in receiver.posts)
    assert thresholds == [50, 80]
