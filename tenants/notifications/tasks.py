"""Celery's entry into notifications: thin; tenants/notifications/delivery.py does the work."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings


@shared_task(
    bind=True,
    name="tenants.notifications.deliver",
    acks_late=True,
    ignore_result=True,
    # Each attempt is counted on the delivery row; this only stops Celery's own count first.
    max_retries=None,
)
def deliver(self, delivery_id: int) -> None:
    """One attempt; on a transient failure, the next one after the doubling backoff."""
    from tenants.notifications.delivery import delivery_attempt

    outcome = delivery_attempt(delivery_id=delivery_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)


@shared_task(name="tenants.notifications.requeue_stalled", acks_late=True, ignore_result=True)
def requeue_stalled() -> None:
    """Idempotent: deliveries whose next attempt's message was lost are enqueued again."""
    from tenants.notifications.delivery import stalled_deliveries

    grace = timedelta(seconds=max(300, 2 * settings.NOTIFY_RETRY_BASE_SECONDS))
    for delivery_id in stalled_deliveries(grace=grace):
        deliver.delay(delivery_id)
