"""Celery tasks of the registry: thin wrappers that take ids and call a service.

On top of the app: they import services; services start them by name (core.tasks).
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from adapters.services.direct_uploads import expire_direct_uploads as expire
from adapters.services.quarantine import purge_rejected_quarantine as purge
from adapters.services.validation import (
    TransientValidationFailure,
    run_validation,
    stalled_validation_ids,
)


@shared_task(
    bind=True,
    acks_late=True,
    # OperationalError: a locked (SQLite) or restarting database; the claim was released.
    autoretry_for=(TransientValidationFailure, OperationalError),
    retry_backoff=5,
    retry_backoff_max=300,
    max_retries=8,
    # Its own limits, far below the hour other tasks get (settings explain what each one does).
    soft_time_limit=settings.VALIDATION_SOFT_TIME_LIMIT,
    time_limit=settings.VALIDATION_TIME_LIMIT,
)
def validate_version(self, version_id: int) -> str:
    version = run_validation(version_id=version_id, delivery=self.request.id or "")
    return version.status if version is not None else "skipped"


@shared_task(acks_late=True)
def requeue_stalled_validations() -> int:
    """Beat entry: re-enqueue uploads whose validation never ran or whose worker died.

    The broker normally redelivers; this covers a lost message or a broker restart.
    """
    version_ids = stalled_validation_ids()
    for version_id in version_ids:
        validate_version.delay(version_id)
    return len(version_ids)


@shared_task(acks_late=True)
def expire_direct_uploads() -> int:
    """Beat entry: discard direct uploads past their expiry (their parts, objects and rows)."""
    return expire()


@shared_task(acks_late=True)
def purge_rejected_quarantine() -> int:
    """Beat entry (hourly): delete rejected versions' quarantine objects past their retention."""
    return purge()
