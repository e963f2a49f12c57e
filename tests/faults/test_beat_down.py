"""celery beat down for two reconcile periods: when it returns, reconcile runs again at once
(once, not once per missed period) and then every period, with no hand.

A real beat (django-celery-beat's database scheduler, FLEET_RECONCILE_SECONDS=5) sends to the
session's real worker; what the worker received is read from its log. The beat is SIGKILLed (a
host gone), left down for two periods, and started again.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from datetime import datetime

import pytest

from tests.faults.record import REPO, FaultRecord, Stopwatch, wait_until
from tests.fixtures.celery_worker import _service_env, beat_command
from tests.paths import TEST_VAR

pytestmark = pytest.mark.django_db(transaction=True)
PERIOD_S = 5
RECEIVED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Task workers\.tasks\.reconcile_fleet\[.*\] received",
    re.M,
)


def _received(log) -> list[float]:
    text = log.read_text(errors="replace")
    return [
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for m in RECEIVED.finditer(text)
    ]


def _beat(queue: str, tmp_path, name: str) -> subprocess.Popen[bytes]:
    log = TEST_VAR / f"faults-beat-{name}.log"
    return subprocess.Popen(
        beat_command(tmp_path / f"beat-{name}"),
        cwd=REPO,
        env=_service_env(queue, FLEET_RECONCILE_SECONDS=str(PERIOD_S)),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_reconcile_catches_up_once_when_beat_returns(world, celery_worker_process, tmp_path):
    queue, log = celery_worker_process["queue"], celery_worker_process["log"]
    first = _beat(queue, tmp_path, "first")
    second = None
    try:
        start = len(_received(log))
        wait_until(lambda: len(_received(log)) >= start + 2, timeout=60, what="two reconciles")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        killed_at = time.time()
        time.sleep(2 * PERIOD_S + 1)  # two periods with no beat
        during = [t for t in _received(log) if t > killed_at + 1]
        second = _beat(queue, tmp_path, "second")
        back = Stopwatch()
        returned_at = time.time()
        wait_until(
            lambda: any(t >= returned_at for t in _received(log)), timeout=60, what="reconcile"
        )
        heal_s = back.elapsed()
        time.sleep(2 * PERIOD_S)
        after = [t for t in _received(log) if t >= returned_at]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=20)
    assert during == [], "reconcile ran while beat was down"
    # Caught up once, then once a period: not one run per missed period at the return.
    burst = [t for t in after if t - after[0] < 1.0]
    assert len(burst) == 1, after
    assert len(after) >= 2, after
    FaultRecord(
        fault="beat-down",
        title=f"celery beat SIGKILLed, down for two reconcile periods ({2 * PERIOD_S} s)",
        part="workers",
        caller_saw="nothing: requests are served from what is known; the fleet is not "
        "reconciled while beat is down (0 runs)",
        heal_s=heal_s,
        lost=f"nothing: reconcile ran once at the return, then every period "
        f"({len(after)} runs in {after[-1] - after[0] + PERIOD_S:.0f} s); no burst",
        test="tests/faults/test_beat_down.py::test_reconcile_catches_up_once_when_beat_returns",
    ).write()
