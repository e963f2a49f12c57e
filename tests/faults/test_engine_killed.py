"""An engine SIGKILLed while the worker's converge pass is loading a version onto it (worker side):
the pass fails cleanly (a failed action or an unreachable engine, no crash), and once the engine
is back the beat's reconcile loads the version again with no hand. The same run checks the other
engine: its residency is untouched.

The session's two real CPU engines, its real worker, and a real beat (reconcile every 5 s).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.utils import timezone

from tests.faults.harness import (
    chain_verifies,
    forget_other_tests_checkpoint,
    resident_on,
)
from tests.faults.record import FaultRecord, Stopwatch, wait_until
from tests.workers.fleet import servable_version
from workers.desired import set_desired
from workers.models import FleetAction

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


def test_an_engine_killed_during_a_load_gets_the_version_back_by_reconcile(
    worker_fleet, tmp_path, engine_control, celery_beat_process, celery_worker_process
):
    fleet = worker_fleet
    forget_other_tests_checkpoint()
    other = servable_version(fleet.world.support, tmp_path, seed=71)
    set_desired(version=other, engine=fleet.b, state="registered", reason="t")
    wait_until(lambda: other.served_name in resident_on(fleet.handle_b), timeout=240, what="B")
    b_before = resident_on(fleet.handle_b)

    version = servable_version(fleet.world.support, tmp_path, seed=72)
    asked_at = timezone.now()
    set_desired(version=version, engine=fleet.a, state="registered", reason="t")
    # The converge pass is on its way (stage, then load): the engine goes down under it.
    time.sleep(0.3)
    process = fleet.handle_a.process.process
    assert process is not None
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    ready_s = engine_control.start(fleet.handle_a)
    back = Stopwatch()
    wait_until(
        lambda: version.served_name in resident_on(fleet.handle_a),
        timeout=240,
        what="reconcile loads it on the restarted engine",
    )
    heal_s = back.elapsed()
    actions = FleetAction.objects.filter(served_name=version.served_name, created_at__gte=asked_at)
    failed = [a.error or a.reason for a in actions.filter(kind="load", ok=False)]
    good_loads = actions.filter(kind="load", ok=True).count()
    assert good_loads >= 1
    # The other engine was never touched.
    assert b_before <= resident_on(fleet.handle_b)
    assert chain_verifies()
    FaultRecord(
        fault="engine-killed-during-load",
        title="An engine SIGKILLed while the worker loads a version onto it (worker side); "
        "the other engine serving meanwhile",
        part="engine",
        caller_saw=f"the pass fails cleanly: {len(failed)} failed load action(s)"
        + (f" ({failed[0][:80]})" if failed else " (the engine was away: skipped)")
        + "; the other engine's residency untouched",
        heal_s=heal_s,
        lost=f"nothing: the version resident again after the restart (engine ready after "
        f"{ready_s:.0f} s), by the beat's reconcile; {good_loads} successful load(s)",
        test="tests/faults/test_engine_killed.py::"
        "test_an_engine_killed_during_a_load_gets_the_version_back_by_reconcile",
    ).write()
