"""Security class 1: one upload cannot hold a validation worker for long. The task declares its
own limits (from VALIDATION_SOFT_TIME_LIMIT), and the sender puts them in the message. A real
prefork Celery worker (the production pool; the session's shared worker uses threads, which have
no time limits) runs the task, sent with a 5 s soft limit, on a version whose model file never
delivers a byte (a FIFO with no writer): the soft limit ends it in `validation.timeout`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.models import AdapterVersion
from adapters.services import uploads
from adapters.tasks import validate_version
from tests.factories import adapter_files, upload
from tests.fixtures.celery_worker import REPO, _service_env, _stop
from tests.paths import TEST_VAR

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def prefork_worker(db, tmp_path) -> Iterator[dict]:
    from portal.celery import app

    queue = f"test-limit-{uuid.uuid4().hex[:8]}"
    log = TEST_VAR / f"{queue}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    storage = tmp_path / "storage"
    env = _service_env(queue, ADAPTER_STORAGE_ROOT=str(storage), VALIDATION_SOFT_TIME_LIMIT="5")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", queue,
         "--pool", "prefork", "--concurrency", "1", "-n", f"{queue}@%h", "--loglevel", "INFO",
         "--without-gossip", "--without-mingle"],
        cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not app.control.ping(destination=[f"{queue}@{os.uname().nodename}"], timeout=0.5):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {log.read_text()[-2000:]}")
        yield {"queue": queue, "storage": storage}
    finally:
        _stop(proc)
        log.unlink(missing_ok=True)


def test_the_validation_task_declares_its_own_limits(settings) -> None:
    options = validate_version._get_exec_options()  # what apply_async puts in the message
    assert options["soft_time_limit"] == settings.VALIDATION_SOFT_TIME_LIMIT
    assert options["time_limit"] == settings.VALIDATION_TIME_LIMIT
    assert settings.VALIDATION_TIME_LIMIT < settings.CELERY_TASK_SOFT_TIME_LIMIT


def test_the_soft_time_limit_ends_a_stuck_validation_in_a_verdict(
    world, settings, tmp_path, monkeypatch, prefork_worker
) -> None:
    settings.ADAPTER_STORAGE_ROOT = str(prefork_worker["storage"])
    monkeypatch.setattr(uploads, "_enqueue_validation", lambda version_id: None)
    response = upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / "a"))
    assert response.status_code == 201, response.json()
    version = AdapterVersion.objects.get(adapter=world.support)
    stuck = (
        Path(settings.ADAPTER_STORAGE_ROOT) / version.quarantine_keys["adapter_model.safetensors"]
    )
    stuck.unlink()
    os.mkfifo(stuck)  # opening it blocks until a writer comes, and none will

    validate_version.apply_async(
        (version.pk,), queue=prefork_worker["queue"], soft_time_limit=5, time_limit=35
    )
    deadline = time.monotonic() + 120  # a wait for the outcome, not a timed assertion
    while time.monotonic() < deadline:
        version.refresh_from_db()
        if version.status not in ("uploaded", "validating"):
            break
        time.sleep(0.5)
    assert version.status == "rejected"
    assert [e["code"] for e in version.validation_report["errors"]] == ["validation.timeout"]
