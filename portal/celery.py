"""The Celery app; configuration comes from Django settings (CELERY_*)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect(weak=False)
@worker_process_init.connect(weak=False)
def _tracing_in_worker(**_: object) -> None:
    """Each worker process traces its tasks, joined to what enqueued them through the task's
    headers (core.telemetry; off when no OTLP endpoint is set). worker_init for the thread and
    solo pools; a prefork child keeps what its parent set up (the batch processor restarts its
    thread after the fork)."""
    from core.telemetry import configure

    configure("lora-portal-worker")
