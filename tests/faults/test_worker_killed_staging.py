"""A Celery worker's pool process SIGKILLed in the middle of staging a version onto its node (the
download under `<root>/.incoming/`): the task runs again at once (acks_late,
reject_on_worker_lost), the node ends with one verified copy, no half download is left in the
adapter root (the killed run's `finally` never ran: the next staging of that version drops the
download whose process is gone, workers.staging.drop_abandoned_downloads; before, it stayed until
the cleanup's one-hour grace), one stage action, no audit event added or doubled.

A prefork worker of the test's own (concurrency 1) on a queue of its own; a 200 MB version in
the local serving store; no engine (staging is the node's disk only).
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import uuid
from pathlib import Path

import pytest

from adapters.models import AdapterVersion
from adapters.storage import get_storage, serving_key
from core.audit_models import AuditEvent
from tests.faults.harness import spawn_worker
from tests.faults.record import FaultRecord, Stopwatch, wait_until
from tests.faults.test_worker_killed import _pool_children
from tests.fixtures.celery_worker import _stop
from workers.models import Engine, FleetAction
from workers.staging import INCOMING, verify_node_copy
from workers.tasks import stage_version_task

pytestmark = pytest.mark.django_db(transaction=True)
MODEL_BYTES = 200 * 1024 * 1024


@pytest.fixture
def node_worker(settings, tmp_path):
    queue = f"faults-stage-{uuid.uuid4().hex[:8]}"
    storage = tmp_path / "storage"
    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(storage)
    proc, log = spawn_worker(
        queue, pool="prefork", concurrency=1, ADAPTER_STORAGE_ROOT=str(storage)
    )
    try:
        yield queue, proc, log
    finally:
        _stop(proc)


def _big_version(world) -> AdapterVersion:
    """A version whose serving files are in the store (as approval leaves them); 200 MB."""
    storage = get_storage()
    files = {
        "adapter_config.json": b'{"peft_type": "LORA", "r": 8}',
        "adapter_model.safetensors": os.urandom(MODEL_BYTES),
    }
    manifest, keys = [], {}
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        key = serving_key(digest, name)
        storage.save_stream(key, io.BytesIO(data), max_bytes=len(data) + 1)
        manifest.append({"name": name, "size": len(data), "sha256": digest})
        keys[name] = key
    number = world.support.versions.count() + 1
    return AdapterVersion.objects.create(
        tenant=world.acme,
        adapter=world.support,
        number=number,
        status="active",
        served_name=f"acme--support--v{number}-{uuid.uuid4().hex[:8]}",
        manifest=manifest,
        manifest_sha256=hashlib.sha256(repr(manifest).encode()).hexdigest(),
        rank=8,
        alpha=16.0,
        target_modules=["q_proj", "v_proj"],
        size_bytes=sum(m["size"] for m in manifest),
        serving_keys=keys,
    )


def _partials(root: Path) -> list[Path]:
    folder = root / INCOMING
    return [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []


def _downloading_model(root: Path) -> bool:
    """The model file's download under way (its temp file, or the file whole, not yet moved)."""
    for path in _partials(root):
        try:
            if path.name != "adapter_config.json" and path.stat().st_size > 0:
                return True
        except FileNotFoundError:  # renamed meanwhile
            continue
    return False


def test_a_staging_whose_process_is_killed_runs_again_and_leaves_one_verified_copy(
    world, node_worker, tmp_path
):
    queue, proc, log = node_worker
    version = _big_version(world)
    root = tmp_path / "node"
    engine = Engine.objects.create(
        name="node-stage",
        base_model=world.base,
        url="http://127.0.0.1:9",
        served_model_name="tiny",
        adapter_root=str(root),
        state="up",
    )
    audit_before = AuditEvent.objects.count()
    stage_version_task.apply_async(args=[engine.pk, version.pk], queue=queue)
    wait_until(
        lambda: _downloading_model(root),
        timeout=120,
        interval=0.01,
        what="the download under way",
    )
    for child in _pool_children(proc.pid):
        os.kill(child, signal.SIGKILL)
    killed = Stopwatch()
    copy = root / version.served_name
    assert not copy.exists(), "killed too late: the copy was already in place"
    wait_until(
        lambda: copy.is_dir() and not _partials(root),
        timeout=120,
        what="a verified copy and no half download",
    )
    heal_s = killed.elapsed()
    verify_node_copy(copy, version.manifest)
    assert [p.name for p in root.iterdir() if p.name != INCOMING] == [version.served_name]
    stages = FleetAction.objects.filter(served_name=version.served_name, kind="stage")
    assert stages.count() == 1
    assert AuditEvent.objects.count() == audit_before
    assert "WorkerLostError" in log.read_text(errors="replace")
    FaultRecord(
        fault="worker-killed-staging",
        title="A Celery worker's pool process SIGKILLed in the middle of staging a version "
        "onto its node (200 MB download)",
        part="workers",
        caller_saw="nothing: the version is not on the node until its copy is whole and verified "
        "(no request reaches a half copy)",
        heal_s=heal_s,
        lost="nothing: redelivered at once, one verified copy, the killed run's half download "
        "removed (was: kept under .incoming/ until the 1 h cleanup grace); 1 stage action, "
        "no audit event added or doubled",
        test="tests/faults/test_worker_killed_staging.py::"
        "test_a_staging_whose_process_is_killed_runs_again_and_leaves_one_verified_copy",
    ).write()
