"""Celery tasks of the eval gate: thin; the work is in evals.services.runner."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from evals.services.runner import run_execute, runs_requeue_stale


@shared_task(bind=True, acks_late=True, ignore_result=True)
def eval_run_execute(self: Any, run_id: int) -> str:
    """One run, from its claim to its verdict. acks_late: a worker that dies mid-run gets the
    task back, which takes its own claim up again and skips each recorded case."""
    run = run_execute(run_id, self.request.id or "")
    return run.status if run is not None else "not claimed"


@shared_task(ignore_result=True)
def requeue_stale_eval_runs() -> list[int]:
    """Beat: runs whose worker stopped marking them alive, queued again for another worker."""
    return runs_requeue_stale()
