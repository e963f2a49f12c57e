"""The validation task run by a real Celery worker, on committed data."""

from __future__ import annotations

import time

import pytest

from adapters.models import AdapterVersion
from adapters.tasks import validate_version
from core.audit_models import AuditEvent
from tests.factories import adapter_files, upload

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker_world(world, settings, celery_worker_process):
    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(celery_worker_process["storage_root"])
    return world


def wait_for_status(version_id: int, statuses: set[str], timeout: float = 60.0) -> AdapterVersion:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        version = AdapterVersion.objects.get(pk=version_id)
        if version.status in statuses:
            return version
        time.sleep(0.2)
    raise AssertionError(f"version {version_id} stayed {version.status!r}, wanted {statuses}")


def test_an_upload_is_validated_by_the_worker_after_commit(worker_world, tmp_path):
    response = upload(
        worker_world.client("bob"), "acme", "support", adapter_files(tmp_path / "ok", rank=16)
    )
    assert response.status_code == 201, response.json()
    version = wait_for_status(
        AdapterVersion.objects.get(adapter=worker_world.support).pk, {"validated", "rejected"}
    )
    assert version.status == "validated", version.validation_report["errors"]
    assert version.rank == 16
    assert version.validation_report["manifest_sha256"] == version.manifest_sha256


def test_a_bad_adapter_is_rejected_with_its_code(worker_world, tmp_path):
    directory = adapter_files(tmp_path / "dora", extra_config={"use_dora": True})
    response = upload(worker_world.client("bob"), "acme", "support", directory)
    assert response.status_code == 201
    version = wait_for_status(
        AdapterVersion.objects.get(adapter=worker_world.support).pk, {"validated", "rejected"}
    )
    assert version.status == "rejected"
    assert "config.dora_not_supported" in [e["code"] for e in version.validation_report["errors"]]


def test_running_the_task_twice_validates_once(worker_world, tmp_path, monkeypatch):
    # Upload without the after-commit enqueue, then deliver the same task twice.
    from adapters.services import uploads

    monkeypatch.setattr(uploads, "_enqueue_validation", lambda version_id: None)
    response = upload(
        worker_world.client("bob"), "acme", "support", adapter_files(tmp_path / "twice")
    )
    version_id = AdapterVersion.objects.get(adapter=worker_world.support).pk
    first = validate_version.delay(version_id)
    second = validate_version.delay(version_id)
    results = sorted([first.get(timeout=60), second.get(timeout=60)])
    assert results == ["skipped", "validated"]
    assert AdapterVersion.objects.get(pk=version_id).status == "validated"
    assert (
        AuditEvent.objects.filter(action="version.validate", object_id="acme/support@1").count()
        == 1
    )
    assert response.status_code == 201


def test_a_stalled_upload_is_found_by_the_sweep(world, tmp_path, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from adapters.services import uploads
    from adapters.services.validation import stalled_validation_ids, version_claim_for_validation

    monkeypatch.setattr(uploads, "_enqueue_validation", lambda version_id: None)
    upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / "stalled"))
    version = AdapterVersion.objects.get(adapter=world.support)
    assert stalled_validation_ids() == []
    AdapterVersion.objects.filter(pk=version.pk).update(
        updated_at=timezone.now() - timedelta(hours=1)
    )
    assert stalled_validation_ids() == [version.pk]
    # A claim that outlived its lease (the worker died) is taken over.
    assert version_claim_for_validation(version_id=version.pk)
    assert not version_claim_for_validation(version_id=version.pk)
    AdapterVersion.objects.filter(pk=version.pk).update(
        updated_at=timezone.now() - timedelta(days=1)
    )
    assert version_claim_for_validation(version_id=version.pk)


def test_a_failure_after_the_claim_releases_it_for_the_retry(world, tmp_path, monkeypatch):
    from django.db import OperationalError

    from adapters.services import uploads, validation

    monkeypatch.setattr(uploads, "_enqueue_validation", lambda version_id: None)
    upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / "locked"))
    version = AdapterVersion.objects.get(adapter=world.support)

    def locked_database(*args, **kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(validation, "validate_adapter", locked_database)
    with pytest.raises(OperationalError):
        validation.run_validation(version_id=version.pk)
    assert AdapterVersion.objects.get(pk=version.pk).status == "uploaded"
    monkeypatch.undo()
    finished = validation.run_validation(version_id=version.pk)
    assert finished is not None and finished.status == "validated"
