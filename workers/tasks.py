"""Celery tasks of the fleet: thin wrappers around workers.services."""

from __future__ import annotations

from celery import shared_task

from workers.services import engines_probe_all


@shared_task(acks_late=True, ignore_result=True)
def probe_engines() -> dict[str, str]:
    """Beat entry: mark engines up or down from their health route."""
    return engines_probe_all()
