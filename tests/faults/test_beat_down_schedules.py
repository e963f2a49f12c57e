"""celery beat down while a business-hours warm-up window opens: when beat returns, the window's
`open` entry is acted on once (the version is kept warm on its pool's engine), and its `close`
entry, not due yet, is not run.

django-celery-beat computes an entry's next run from its `last_run_at` (for an entry that never
ran, the time it was saved), so a crontab time passed while beat was away is due at its return,
once however many were missed (celery's crontab). Pin policies have no window: they are applied
when the policy is saved (a task after commit, no beat), so beat's absence does not delay them.

A real beat (database scheduler) and the session's real worker; an Engine row of the adapter's
pool (no engine process: the wish is what the schedule sets; the converge is the fleet's part).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from adapters.models import WarmupPolicy
from tests.faults.record import REPO, FaultRecord, Stopwatch, wait_until
from tests.fixtures.celery_worker import _service_env, beat_command
from tests.paths import TEST_VAR
from tests.workers.fleet import servable_version
from workers.models import Engine, Residency, ResidencyState
from workers.schedules import sync_adapter_schedule

pytestmark = pytest.mark.django_db(transaction=True)
APPLIED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Task workers\.schedules\.apply_warmup_window"
    r"\[.*\] received",
    re.M,
)


def _received(log) -> list[float]:
    return [
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for m in APPLIED.finditer(log.read_text(errors="replace"))
    ]


def _beat(queue: str, tmp_path, name: str) -> subprocess.Popen[bytes]:
    log = TEST_VAR / f"faults-beat-schedules-{name}.log"
    return subprocess.Popen(
        beat_command(tmp_path / f"beat-{name}"),
        cwd=REPO,
        env=_service_env(queue),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _warm(version, engine) -> bool:
    row = Residency.objects.filter(version=version, engine=engine).first()
    return row is not None and row.desired_state == ResidencyState.RESIDENT_GPU


def test_a_warmup_window_that_opened_while_beat_was_down_is_applied_once_at_its_return(
    world, celery_worker_process, tmp_path
):
    queue, log = celery_worker_process["queue"], celery_worker_process["log"]
    engine = Engine.objects.create(
        name="sched-node",
        base_model=world.base,
        url="http://127.0.0.1:9",
        served_model_name="tiny",
        adapter_root=str(tmp_path / "node"),
        state="up",
        pool="shared",
        max_lora_rank=32,
    )
    version = servable_version(world.support, tmp_path, seed=851)
    first = _beat(queue, tmp_path, "first")
    second = None
    try:
        # A window opening at the next minute (at least 10 s away: beat must be down by then).
        now = datetime.now(UTC)
        opens = (now + timedelta(seconds=70)).replace(second=0, microsecond=0)
        adapter = world.support
        adapter.warmup_policy = WarmupPolicy.PRELOAD_BUSINESS_HOURS
        adapter.warmup_timezone, adapter.warmup_days = "UTC", "*"
        adapter.warmup_start = opens.time()
        adapter.warmup_end = (opens + timedelta(minutes=30)).time()
        adapter.save()
        before = len(_received(log))
        assert sync_adapter_schedule(adapter=adapter) == "close"
        wait_until(lambda: len(_received(log)) > before, timeout=60, what="the one-shot close")
        time.sleep(2)  # beat has read the new entries
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        killed_at = time.time()
        wait_until(
            lambda: datetime.now(UTC) > opens + timedelta(seconds=3),
            timeout=90,
            interval=0.5,
            what="the window opens while beat is down",
        )
        assert not _warm(version, engine)  # nobody acted on it meanwhile
        during = [t for t in _received(log) if t > killed_at]
        second = _beat(queue, tmp_path, "second")
        returned_at = time.time()
        back = Stopwatch()
        wait_until(lambda: _warm(version, engine), timeout=60, what="the window applied")
        heal_s = back.elapsed()
        time.sleep(5)  # beat keeps running: nothing more is due
        after = [t for t in _received(log) if t >= returned_at]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=20)
    assert during == []
    assert len(after) == 1, after  # the open entry, once; the close entry is not due
    FaultRecord(
        fault="beat-down-warmup-window",
        title="celery beat SIGKILLed while a business-hours warm-up window opens",
        part="workers",
        caller_saw="nothing: the version is served on demand (cold loads) until the window is "
        "applied; no warm-up while beat is down (0 runs)",
        heal_s=heal_s,
        lost="nothing: the window's open entry ran once at beat's return (the version desired "
        "warm on its pool's engine); the close entry not run; no burst",
        test="tests/faults/test_beat_down_schedules.py::"
        "test_a_warmup_window_that_opened_while_beat_was_down_is_applied_once_at_its_return",
    ).write()
