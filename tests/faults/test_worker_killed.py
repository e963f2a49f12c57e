"""A Celery worker's process SIGKILLed in the middle of a validation: the task runs again at once
and the version ends validated, with one verdict and one audit event.

A prefork worker (concurrency 1) validates a ~300 MB adapter; while the version is `validating`
its pool process is SIGKILLed (what the kernel's OOM killer does). With acks_late and
reject_on_worker_lost the broker (Redis) gets the task back at once and the worker runs it in a
new pool process; the run takes the claim over (it is the same task: adapters.services.validation)
instead of finding the version claimed and leaving it `validating` until the claim's lease lapses
(VALIDATION_TIME_LIMIT + 60 s) and the beat's requeue (every 300 s) comes.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest

from adapters.access import AccessContext, SystemAccess
from adapters.models import Adapter, AdapterVersion
from adapters.services.registry import base_model_register
from adapters.services.uploads import IncomingFile, version_upload
from bench.upload_support import BIG_BASE_MODEL, BIG_HF_CONFIG, GeneratedAdapter
from core.audit_models import AuditEvent
from tests.faults.harness import chain_verifies, spawn_worker
from tests.faults.record import FaultRecord, Stopwatch, wait_until
from tests.fixtures.celery_worker import _stop

pytestmark = pytest.mark.django_db(transaction=True)
MODEL_BYTES = 300 * 1024 * 1024


@pytest.fixture
def prefork_worker(settings, tmp_path):
    from portal.celery import app

    queue = f"faults-{uuid.uuid4().hex[:8]}"
    storage = tmp_path / "storage"
    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(storage)
    proc, log = spawn_worker(
        queue, pool="prefork", concurrency=1, ADAPTER_STORAGE_ROOT=str(storage)
    )
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        yield proc, log
    finally:
        app.conf.task_default_queue = previous
        _stop(proc)


def _pool_children(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return children


def test_a_validation_whose_process_is_killed_runs_again_at_once(world, prefork_worker, tmp_path):
    proc, log = prefork_worker
    base = base_model_register(
        access=SystemAccess(), name=BIG_BASE_MODEL, source="bench", hf_config=BIG_HF_CONFIG
    )
    adapter = Adapter.objects.create(
        tenant=world.acme, name="big", base_model=base, created_by=world.users["bob"]
    )
    files = GeneratedAdapter(MODEL_BYTES).write(tmp_path / "big")
    model = files / "adapter_model.safetensors"
    with model.open("rb") as stream:
        version = version_upload(
            access=AccessContext.for_user(world.users["bob"]),
            adapter=adapter,
            config=IncomingFile((files / "adapter_config.json").open("rb"), None),
            model=IncomingFile(stream, model.stat().st_size),
        )
    wait_until(
        lambda: AdapterVersion.objects.get(pk=version.pk).status == "validating",
        timeout=60,
        interval=0.02,
        what="the validation starts",
    )
    children = _pool_children(proc.pid)
    assert children, "no pool process"
    for child in children:
        os.kill(child, signal.SIGKILL)
    killed = Stopwatch()
    assert AdapterVersion.objects.get(pk=version.pk).status == "validating", "killed too late"
    heal_s = (
        wait_until(
            lambda: (
                AdapterVersion.objects.get(pk=version.pk).status not in ("uploaded", "validating")
            ),
            timeout=120,
            what="a verdict after the kill (the redelivered task was refused its claim)",
        )
        + killed.elapsed()
    )
    version.refresh_from_db()
    assert version.status == "validated", version.validation_report
    assert version.validation_report.get("attempts", 2) >= 1
    label = f"acme/big@{version.number}"
    verdicts = AuditEvent.objects.filter(object_id=label, action__startswith="version.validat")
    assert verdicts.count() == 1, list(verdicts.values_list("action", flat=True))
    assert chain_verifies()
    assert "WorkerLostError" in log.read_text(errors="replace")
    FaultRecord(
        fault="worker-killed-validation",
        title="A Celery worker's pool process SIGKILLed in the middle of a validation (300 MB)",
        part="workers",
        caller_saw="the version stays `validating` (API and pages show it), no error",
        heal_s=heal_s,
        lost="nothing: redelivered at once, validated once, 1 verdict audit event; "
        "audit chain verifies",
        test="tests/faults/test_worker_killed.py::"
        "test_a_validation_whose_process_is_killed_runs_again_at_once",
    ).write()
