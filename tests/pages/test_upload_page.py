"""The upload page: files stream to version_upload; errors show on the page with their status."""

import hashlib
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from adapters.models import AdapterVersion
from tests.factories import adapter_files

pytestmark = pytest.mark.django_db
URL = reverse("version-upload", args=["acme", "support"])


def _files(tmp_path, **extra):
    d = adapter_files(tmp_path / "upload", seed=11)
    return {
        "adapter_config": SimpleUploadedFile(
            "adapter_config.json", (d / "adapter_config.json").read_bytes()
        ),
        "adapter_model": SimpleUploadedFile(
            "adapter_model.safetensors", (d / "adapter_model.safetensors").read_bytes()
        ),
        **extra,
    }, d


def _stored_files(settings):
    root = Path(settings.ADAPTER_STORAGE_ROOT)
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_the_form_has_the_fields_and_a_progress_bar(pages):
    page = pages.client("bob").get(URL).content.decode()
    for name in ("adapter_config", "adapter_model", "signature"):
        assert f'name="{name}"' in page
    assert (
        "<progress" in page
        and "portal/upload.js" in page
        and 'enctype="multipart/form-data"' in page
    )


def test_a_maintainer_uploads_a_version(pages, tmp_path):
    before = AdapterVersion.objects.filter(adapter=pages.world.support).count()
    data, d = _files(tmp_path)
    response = pages.client("bob").post(URL, data)
    version = AdapterVersion.objects.filter(adapter=pages.world.support).latest("number")
    assert AdapterVersion.objects.filter(adapter=pages.world.support).count() == before + 1
    assert response.status_code == 302
    assert response["Location"] == reverse(
        "version-detail", args=["acme", "support", version.number]
    )
    assert version.status == "uploaded" and version.uploaded_by == pages.world.users["bob"]
    digests = {f["name"]: f["sha256"] for f in version.manifest}
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert digests[name] == hashlib.sha256((d / name).read_bytes()).hexdigest()


def test_a_missing_file_is_named(pages, tmp_path):
    data, _ = _files(tmp_path)
    del data["adapter_model"]
    response = pages.client("bob").post(URL, data)
    assert response.status_code == 400
    assert b"upload.missing_file" in response.content and b"adapter_model" in response.content


def test_a_too_large_file_is_refused_and_nothing_is_kept(pages, tmp_path, settings):
    kept = _stored_files(settings)
    count = AdapterVersion.objects.count()
    settings.ADAPTER_MAX_MODEL_BYTES = 100
    data, _ = _files(tmp_path)
    response = pages.client("bob").post(URL, data)
    assert response.status_code == 413
    assert b"upload.too_large" in response.content
    assert AdapterVersion.objects.count() == count
    assert _stored_files(settings) == kept


def test_a_quota_overflow_is_refused_and_nothing_is_kept(pages, tmp_path, settings):
    kept = _stored_files(settings)
    count = AdapterVersion.objects.count()
    pages.world.acme.quota_storage_bytes = 1000
    pages.world.acme.save()
    data, _ = _files(tmp_path)
    response = pages.client("bob").post(URL, data)
    assert response.status_code == 413
    assert b"quota.storage" in response.content
    assert AdapterVersion.objects.count() == count
    assert _stored_files(settings) == kept


def test_a_viewer_cannot_upload(pages, tmp_path):
    data, _ = _files(tmp_path)
    count = AdapterVersion.objects.count()
    response = pages.client("vera").post(URL, data)
    assert response.status_code == 403
    assert AdapterVersion.objects.count() == count


def test_an_oversized_signature_is_refused(pages, tmp_path):
    data, _ = _files(tmp_path, signature=SimpleUploadedFile("sig", b"x" * (256 * 1024 + 10)))
    count = AdapterVersion.objects.count()
    response = pages.client("bob").post(URL, data)
    assert response.status_code == 413
    assert b"upload.signature_too_large" in response.content
    assert AdapterVersion.objects.count() == count
