"""Uploads through the API (multipart POST .../versions/) on both storage backends: what is stored
is what was sent, and a refused upload leaves nothing: no object, no temp file, no row, no event."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from django.core.files.uploadhandler import TemporaryFileUploadHandler

from adapters.models import AdapterVersion
from core.audit_models import AuditEvent
from tests.factories import adapter_files, upload
from tests.storage.probes import leftovers


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def temp_dir(settings, tmp_path):
    """Django's upload temp files go here, and every file past 0 bytes goes to a temp file."""
    folder = tmp_path / "upload-tmp"
    folder.mkdir()
    settings.FILE_UPLOAD_TEMP_DIR = str(folder)
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 0
    return folder


@pytest.fixture
def temp_files_made(monkeypatch):
    made: list[str] = []
    original = TemporaryFileUploadHandler.new_file

    def spy(self, *args, **kwargs):
        made.append(args[1] if len(args) > 1 else kwargs.get("file_name", ""))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TemporaryFileUploadHandler, "new_file", spy)
    return made


def last_event_id() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def test_it_stores_exactly_what_was_sent(world, backend, temp_dir, temp_files_made, tmp_path):
    files = adapter_files(tmp_path / "a", rank=32, targets=("q_proj", "k_proj", "v_proj", "o_proj"))
    response = upload(world.client("bob"), "acme", "support", files)
    assert response.status_code == 201, response.json()
    version = AdapterVersion.objects.get(adapter=world.support)
    for entry in version.manifest:
        assert entry["sha256"] == sha256(files / entry["name"])
        stored = backend.verify_object(
            version.quarantine_keys[entry["name"]], entry["size"], entry["sha256"]
        )
        assert stored.sha256 == entry["sha256"]
    assert backend.list("quarantine/") == sorted(version.quarantine_keys.values())
    assert sorted(temp_files_made) == ["adapter_config.json", "adapter_model.safetensors"]
    assert list(temp_dir.iterdir()) == []  # Django's temp files are gone with the request


def test_a_quota_overflow_is_refused_and_leaves_nothing(
    world, backend, temp_dir, temp_files_made, tmp_path
):
    files = adapter_files(tmp_path / "a", rank=64, targets=("q_proj", "v_proj", "gate_proj"))
    size = sum(
        (files / name).stat().st_size
        for name in ("adapter_config.json", "adapter_model.safetensors")
    )
    # One byte short: the body's Content-Length passes the early check, the files' sizes do not.
    world.acme.quota_storage_bytes = size - 1
    world.acme.save()
    client = world.client("bob")  # logging in is an event of its own
    since = last_event_id()

    response = upload(client, "acme", "support", files)

    assert response.status_code == 413, response.json()
    error = response.json()["error"]
    assert error["code"] == "quota.storage" and error["details"]["quota_bytes"] == size - 1
    assert temp_files_made, "the body was parsed into temp files before the exact check"
    assert list(temp_dir.iterdir()) == []
    assert leftovers(backend) == []
    assert not AdapterVersion.objects.exists()
    assert not AuditEvent.objects.filter(id__gt=since).exists()


def test_a_body_that_cannot_fit_is_refused_before_it_is_parsed(
    world, backend, temp_dir, temp_files_made, tmp_path
):
    files = adapter_files(
        tmp_path / "a", rank=64, targets=("q_proj", "v_proj", "gate_proj", "up_proj")
    )
    world.acme.quota_storage_bytes = 1000
    world.acme.save()
    client = world.client("bob")
    since = last_event_id()
    response = upload(client, "acme", "support", files)
    assert response.status_code == 413 and response.json()["error"]["code"] == "quota.storage"
    assert temp_files_made == []
    assert leftovers(backend) == [] and not AdapterVersion.objects.exists()
    assert not AuditEvent.objects.filter(id__gt=since).exists()


@pytest.mark.parametrize("early", [True, False], ids=["by-content-length", "by-file-size"])
def test_a_file_over_its_cap_is_refused_and_leaves_nothing(
    world, backend, temp_dir, settings, tmp_path, early
):
    files = adapter_files(
        tmp_path / "a", rank=64, targets=("q_proj", "v_proj", "gate_proj", "up_proj")
    )
    model_size = (files / "adapter_model.safetensors").stat().st_size
    # The body check allows for the config's cap and framing; the exact check is per file.
    settings.ADAPTER_MAX_MODEL_BYTES = 1000 if early else model_size - 1
    response = upload(world.client("bob"), "acme", "support", files)
    assert response.status_code == 413, response.json()
    assert response.json()["error"]["code"] == "upload.too_large"
    assert list(temp_dir.iterdir()) == [] and leftovers(backend) == []
    assert not AdapterVersion.objects.exists()


def test_uploads_to_another_tenants_adapter_do_not_exist(world, backend, temp_dir, tmp_path):
    files = adapter_files(tmp_path / "a")
    response = upload(world.client("charlie"), "acme", "support", files)
    assert response.status_code == 404 and response.json()["error"]["code"] == "tenant.not_found"
    viewer = upload(world.client("vera"), "acme", "support", files)
    assert viewer.status_code == 403
    assert leftovers(backend) == [] and not AdapterVersion.objects.exists()
