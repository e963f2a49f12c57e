"""Celery tasks of the eval gate and of release plans: thin; the work is in evals.services."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from celery import shared_task

from evals.services import live_samples, release_controller, shadow_pairs
from evals.services.runner import run_execute, runs_requeue_stale
from workers import shared_state


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


@shared_task(acks_late=True, ignore_result=True, name="evals.tasks.release_plans_tick")
def release_plans_tick(now: float | None = None) -> list[dict[str, Any]]:
    """Beat: judge every running release plan's step and move it at most once. Harmless when
    redelivered or run on two workers at once: each move is claimed by a conditional update.
    `now` (epoch seconds) is for tests; beat passes nothing."""
    return [asdict(p) for p in release_controller.plans_tick(client=shared_state.client(), now=now)]


@shared_task(ignore_result=True, name="evals.tasks.delete_expired_release_samples")
def delete_expired_release_samples() -> int:
    """Beat (hourly): kept sample text past its plan's keep_text_days is deleted."""
    return live_samples.samples_delete_expired()


@shared_task(ignore_result=True, name="evals.tasks.score_release_samples")
def score_release_samples() -> int:
    """Beat: count the live answers the gateway sampled for release plans."""
    return live_samples.samples_score(client=shared_state.client())


@shared_task(ignore_result=True, name="evals.tasks.ask_shadow_pairs")
def ask_shadow_pairs() -> dict[str, int]:
    """Beat: ask the candidate of each plan in a shadow step a few of the stable's sampled
    requests in the background lane, and judge the pairs (one pass at a time, by a lock)."""
    return shadow_pairs.pairs_ask(client=shared_state.client())
