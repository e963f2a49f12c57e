"""An eval run whose worker is SIGKILLed outright (the whole worker, not one pool process): the
broker keeps its task unacknowledged for hours, so the run's heartbeat goes stale, beat's task
queues it again, and another worker takes it up and finishes it with every case recorded once,
the cases recorded before the kill kept as they were. On the real engines, real worker processes.
"""

from __future__ import annotations

import os
import signal
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from core.audit_models import AuditEvent
from evals.models import EvalCaseResult, EvalRun
from tests.evals.runs import gated_run_held_back
from tests.faults.harness import spawn_worker
from tests.faults.record import wait_until
from tests.fixtures.celery_worker import _stop
from tests.workers.conftest import worker_fleet  # noqa: F401 - fixture

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]

STALE_S = 3


def test_a_run_whose_worker_was_killed_is_taken_up_by_another_worker(
    worker_fleet,  # noqa: F811 - fixture
    tmp_path,
    monkeypatch,
    celery_worker_process,
):
    from evals.tasks import eval_run_execute, requeue_stale_eval_runs

    world = worker_fleet.world
    cases = [{"id": f"c{i}", "prompt": f"Count to {i}.", "max_tokens": 12} for i in range(10)]
    run = gated_run_held_back(world, monkeypatch, tmp_path, cases, seed=12)

    # Both workers on one queue of the test's own (their tasks, and what they enqueue, go there).
    queue = f"evals-{uuid.uuid4().hex[:8]}"
    env = {
        "ADAPTER_STORAGE_ROOT": str(celery_worker_process["storage_root"]),
        "ENGINE_QUEUE_PREFIX": f"{celery_worker_process['queue']}.node.",
        "EVAL_RUN_CONCURRENCY": "1",
        "EVAL_RUN_HEARTBEAT_SECONDS": "1",
        "EVAL_RUN_CLAIM_STALE_SECONDS": str(STALE_S),
    }
    first, first_log = spawn_worker(queue, pool="prefork", concurrency=1, **env)
    second = None
    try:
        eval_run_execute.apply_async([run.pk], queue=queue)
        wait_until(
            lambda: EvalRun.objects.get(pk=run.pk).cases_done >= 2,
            timeout=180,
            what="two cases recorded",
        )
        os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool: nothing acknowledges
        first.wait()
        killed = EvalRun.objects.get(pk=run.pk)
        assert killed.status == "running" and killed.cases_done < len(cases)
        kept = dict(EvalCaseResult.objects.filter(run=run).values_list("id", "created_at"))

        second, second_log = spawn_worker(queue, pool="prefork", concurrency=1, **env)

        def stale() -> bool:
            beat = EvalRun.objects.get(pk=run.pk).heartbeat_at
            return beat is not None and beat < timezone.now() - timedelta(seconds=STALE_S)

        wait_until(stale, timeout=30, what="the killed worker's heartbeat goes stale")
        requeue_stale_eval_runs.apply_async(queue=queue)  # what beat sends
        wait_until(
            lambda: EvalRun.objects.get(pk=run.pk).status in ("finished", "failed"),
            timeout=240,
            what="the run finished by the second worker",
        )
        finished = EvalRun.objects.get(pk=run.pk)
    finally:
        _stop(first)
        if second is not None:
            _stop(second)
    assert finished.status == "finished", (finished.error, second_log.read_text()[-2000:])
    assert finished.claimed_by and finished.claimed_by != killed.claimed_by
    assert finished.cases_done == len(cases)
    sides = list(EvalCaseResult.objects.filter(run=run).values_list("case_id", "side"))
    assert sorted(sides) == sorted((c["id"], s) for c in cases for s in ("candidate", "baseline"))
    # What the killed worker recorded stayed as it was: never asked again.
    after = dict(
        EvalCaseResult.objects.filter(run=run, id__in=kept).values_list("id", "created_at")
    )
    assert after == kept
    requeued = AuditEvent.objects.filter(action="eval_run.requeued", object_id=str(run.pk))
    assert requeued.count() == 1
    assert (requeued.get().before or {}).get("claimed_by") == killed.claimed_by
    assert AuditEvent.objects.filter(action="eval_run.finish", object_id=str(run.pk)).count() == 1
