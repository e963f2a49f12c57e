"""get_storage() builds the backend the settings name, and refuses a half-made configuration."""

from __future__ import annotations

import io

import pytest

from adapters.storage import LocalDiskStorage, StorageMisconfigured, get_storage, serving_key
from adapters.storage.s3 import S3Storage


def test_it_builds_the_local_backend(settings, tmp_path) -> None:
    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(tmp_path / "store")
    settings.S3_ALLOWED_PREFIXES = "serving/, quarantine/"

    storage = get_storage()

    assert isinstance(storage, LocalDiskStorage)
    assert storage.root == (tmp_path / "store").resolve()
    assert storage.allowed_prefixes == ("serving/", "quarantine/")
    assert get_storage() is storage  # reused while the settings stay the same


def test_changed_settings_give_a_new_backend(settings, tmp_path) -> None:
    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(tmp_path / "one")
    first = get_storage()
    settings.ADAPTER_STORAGE_ROOT = str(tmp_path / "two")

    assert get_storage() is not first


@pytest.mark.s3
def test_it_builds_the_s3_backend_against_the_server(settings, s3_server, s3_storage) -> None:
    settings.ADAPTER_STORAGE_BACKEND = "s3"
    settings.S3_BUCKET = s3_storage.bucket
    settings.S3_ENDPOINT_URL = s3_server.endpoint_url
    settings.S3_REGION = s3_server.region
    settings.S3_ACCESS_KEY_ID = s3_server.access_key_id
    settings.S3_SECRET_ACCESS_KEY = s3_server.secret_access_key
    settings.S3_ALLOWED_PREFIXES = ["serving/"]

    storage = get_storage()
    key = serving_key("ab" * 32, "adapter_config.json")
    storage.save_stream(key, io.BytesIO(b"{}"), max_bytes=2)

    assert isinstance(storage, S3Storage)
    assert s3_storage.exists(key)


@pytest.mark.parametrize(
    "overrides",
    [
        {"ADAPTER_STORAGE_BACKEND": "ftp"},
        {"ADAPTER_STORAGE_BACKEND": "local", "ADAPTER_STORAGE_ROOT": ""},
        {"ADAPTER_STORAGE_BACKEND": "s3", "S3_BUCKET": ""},
        {"ADAPTER_STORAGE_BACKEND": "s3", "S3_BUCKET": "b", "S3_ACCESS_KEY_ID": "only-the-id"},
    ],
)
def test_it_refuses_incomplete_settings(settings, overrides) -> None:
    settings.S3_ACCESS_KEY_ID = ""
    settings.S3_SECRET_ACCESS_KEY = ""
    for name, value in overrides.items():
        setattr(settings, name, value)

    with pytest.raises(StorageMisconfigured):
        get_storage()
