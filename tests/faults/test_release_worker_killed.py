"""A Celery worker SIGKILLed in the middle of a release plan's decision: the plan stays where it
was, and once a worker runs again the beat's next tick takes the decision, once.

A real beat ticks the release controller every second onto a real prefork worker. The test holds
the alias's row lock from a connection of its own, so the worker's decision (the plan's claim
taken, the weights about to move, in one transaction) waits there; the worker's whole process
group is then SIGKILLed. PostgreSQL rolls its transaction back (the claim with it). The lock is
let go, a new worker starts, and the plan advances exactly once: one decision, one revision of
the alias, one audit event.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import psycopg
import pytest
from django.db import connection

from adapters.models import Alias
from core.audit_models import AuditEvent
from evals.models import PlanStatus, ReleaseDecision, ReleasePlan, ReleaseStep
from tests.evals.test_release_plans import start, with_checks
from tests.faults.harness import chain_verifies, spawn_worker
from tests.faults.record import FaultRecord, Stopwatch, wait_until
from tests.fixtures.celery_worker import _service_env, _stop, beat_command
from tests.gateway.test_releases import acme, measurement, record  # noqa: F401 - acme: a fixture
from tests.paths import REPO, TEST_VAR

pytestmark = pytest.mark.django_db(transaction=True)


def _dsn() -> str:
    db = connection.settings_dict
    return f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def _waiting_on_a_lock() -> int | None:
    """The session of the database waiting on a row lock (the worker's, behind the test's)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        row = cursor.fetchone()
        return row[0] if row else None


def _session_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return bool(cursor.fetchone()[0])


@pytest.fixture
def queue(settings):
    from portal.celery import app

    name = f"faults-rel-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = name
    yield name
    app.conf.task_default_queue = previous


@pytest.fixture
def beat(queue, tmp_path):
    log = TEST_VAR / f"celery-beat-{queue}.log"
    proc = subprocess.Popen(
        beat_command(tmp_path / "beat-schedule"),
        cwd=REPO,
        env=_service_env(queue, RELEASE_TICK_SECONDS="1"),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield proc
    _stop(proc)


def test_a_worker_killed_mid_decision_leaves_the_plan_and_the_next_tick_decides_once(
    acme,  # noqa: F811
    queue,
    beat,
):
    # A slug of its own: no other test's gateway counts share its Redis fields.
    acme.acme.slug = f"rel-{uuid.uuid4().hex[:10]}"
    acme.acme.save()
    with_checks(acme)
    plan = start(acme, steps=(5, 50, 100))
    # Both sides served without an error since the step began (the errors guard's counts, as
    # the real gateway recorder writes them).
    now = time.time()
    record(
        [
            measurement(acme.acme.slug, f"support@{n}", now, ok=True)
            for n in (1, 2)
            for _ in range(300)
        ]
    )
    ReleaseStep.objects.filter(plan=plan, index=0).update(
        stable_n=400, stable_passed=400, candidate_n=400, candidate_passed=400
    )
    alias = Alias.objects.get(pk=plan.alias_id)
    revisions = alias.revisions.count()

    holder = psycopg.connect(_dsn())
    holder.execute("SELECT 1 FROM adapters_alias WHERE id = %s FOR UPDATE", [alias.pk])
    worker, log = spawn_worker(queue, pool="prefork", concurrency=1)
    try:
        wait_until(_waiting_on_a_lock, timeout=60, what="the worker's decision to wait on the lock")
        waiting = _waiting_on_a_lock()  # still waiting: the test holds the lock
        assert waiting is not None
        _stop_hard(worker)
        killed = Stopwatch()
    finally:
        # Let go: the killed worker's session takes the lock, finds its client gone and rolls
        # its transaction back, the plan's claim with it.
        holder.rollback()
        holder.close()
        _stop(worker)
    wait_until(
        lambda: not _session_alive(waiting), timeout=30, what="the killed worker's session to end"
    )
    plan.refresh_from_db()
    assert (plan.status, plan.current_step) == (PlanStatus.RUNNING, 0)
    assert not ReleaseDecision.objects.exists()
    assert alias.revisions.count() == revisions

    worker, log = spawn_worker(queue, pool="prefork", concurrency=1)
    try:
        heal_s = (
            wait_until(
                lambda: ReleasePlan.objects.get(pk=plan.pk).current_step == 1,
                timeout=60,
                what="the next tick to advance the plan",
            )
            + killed.elapsed()
        )
        # The controller has looked at the new step since: any second decision would be in.
        wait_until(
            lambda: ReleaseStep.objects.get(plan=plan, index=1).evaluated_at is not None,
            timeout=60,
            what="a tick on the next step",
        )
    finally:
        _stop(worker)
    decisions = list(ReleaseDecision.objects.values_list("step", "action", "automatic"))
    assert decisions == [(0, "advance", True)]
    assert alias.revisions.count() == revisions + 1
    assert AuditEvent.objects.filter(action="release_plan.advance").count() == 1
    assert AuditEvent.objects.filter(action="alias.release_step").count() == 2  # start, advance
    assert chain_verifies()
    FaultRecord(
        fault="worker-killed-release-decision",
        title="A Celery worker SIGKILLed in the middle of a release plan's decision",
        part="workers",
        caller_saw="the alias keeps serving the step's weights; the plan shows the step running",
        heal_s=heal_s,
        lost="nothing: the claim rolled back with the transaction; 1 decision, 1 alias "
        "revision, 1 audit event for the advance after the restart; audit chain verifies",
        test="tests/faults/test_release_worker_killed.py::"
        "test_a_worker_killed_mid_decision_leaves_the_plan_and_the_next_tick_decides_once",
    ).write()


def _stop_hard(proc: subprocess.Popen[bytes]) -> None:
    import os
    import signal

    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
