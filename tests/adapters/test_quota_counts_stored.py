"""Security class 2: every byte a tenant stored counts against its storage quota until it is
deleted, rejected versions included; the hourly purge deletes rejected quarantine objects after
QUARANTINE_RETENTION_DAYS, audited, and only then do their bytes stop counting."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from adapters.models import AdapterVersion
from adapters.services import uploads
from adapters.tasks import purge_rejected_quarantine, validate_version
from core.audit_models import AuditEvent
from tests.factories import adapter_files, upload


def files_size(directory: Path) -> int:
    return sum(
        (directory / name).stat().st_size
        for name in ("adapter_config.json", "adapter_model.safetensors")
    )


@pytest.fixture(autouse=True)
def week_of_retention(settings, monkeypatch):
    settings.QUARANTINE_RETENTION_DAYS = 7
    # The test runs the validation task itself, as the worker would after the upload commits.
    monkeypatch.setattr(uploads, "_enqueue_validation", lambda version_id: None)


def upload_rejected(world, tmp_path: Path) -> AdapterVersion:
    """A version the validator rejected (DoRA), its files in quarantine."""
    bad = adapter_files(tmp_path / "dora", rank=16, extra_config={"use_dora": True})
    response = upload(world.client("bob"), "acme", "support", bad)
    assert response.status_code == 201, response.json()
    version = AdapterVersion.objects.get(adapter=world.support)
    validate_version(version.pk)
    shown = world.client("bob").get("/api/v1/tenants/acme/adapters/support/versions/1/").json()
    assert shown["status"] == "rejected"
    return AdapterVersion.objects.get(pk=version.pk)


def retention_passes(version: AdapterVersion, days: int) -> None:
    AdapterVersion.objects.filter(pk=version.pk).update(
        updated_at=timezone.now() - timedelta(days=days)
    )


def test_a_rejected_upload_counts_until_its_purge(world, backend, tmp_path):
    rejected = upload_rejected(world, tmp_path)
    good = adapter_files(tmp_path / "good", rank=16)
    # Room for the new upload only if the rejected version's bytes did not count.
    world.acme.quota_storage_bytes = rejected.size_bytes + files_size(good) - 1
    world.acme.save()
    client = world.client("bob")

    refused = upload(client, "acme", "support", good)
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "quota.storage"
    assert refused.json()["error"]["details"]["used_bytes"] == rejected.size_bytes

    retention_passes(rejected, days=6)  # inside the retention: kept, still counted
    assert purge_rejected_quarantine() == 0
    assert upload(client, "acme", "support", good).status_code == 413
    assert set(backend.list("quarantine/")) == set(rejected.quarantine_keys.values())

    retention_passes(rejected, days=8)
    assert purge_rejected_quarantine() == 1
    assert backend.list("quarantine/") == []
    event = AuditEvent.objects.get(action="version.quarantine_purge")
    assert (event.tenant, event.object_id) == (world.acme, "acme/support@1")
    assert event.before is not None and event.before["size_bytes"] == rejected.size_bytes

    accepted = upload(client, "acme", "support", good)
    assert accepted.status_code == 201, accepted.json()
    # The purged version stays on record (its report, its decision trail), without files.
    shown = client.get("/api/v1/tenants/acme/adapters/support/versions/1/").json()
    assert shown["status"] == "rejected"
    assert purge_rejected_quarantine() == 0  # idempotent: one purge, one event
    assert AuditEvent.objects.filter(action="version.quarantine_purge").count() == 1


def test_a_failed_delete_keeps_the_bytes_counted(world, backend, tmp_path, monkeypatch):
    from adapters.storage import BackendError

    rejected = upload_rejected(world, tmp_path)
    retention_passes(rejected, days=8)
    original_delete = type(backend).delete
    monkeypatch.setattr(
        type(backend), "delete", lambda self, key: (_ for _ in ()).throw(BackendError("down"))
    )
    assert purge_rejected_quarantine() == 0
    assert uploads.storage_used(world.acme) == rejected.size_bytes
    assert not AuditEvent.objects.filter(action="version.quarantine_purge").exists()
    monkeypatch.setattr(type(backend), "delete", original_delete)
    assert purge_rejected_quarantine() == 1
    assert uploads.storage_used(world.acme) == 0


def test_the_purge_runs_from_beat(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["purge-rejected-quarantine"]
    assert entry["task"] == purge_rejected_quarantine.name
