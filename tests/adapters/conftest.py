"""Upload tests run against both storage backends: `backend` configures the portal's settings
for local disk or the moto S3 server and yields the storage the portal will use."""

from __future__ import annotations

from typing import Any

import pytest


def use_s3(settings: Any, server: Any, bucket: str) -> None:
    settings.ADAPTER_STORAGE_BACKEND = "s3"
    settings.S3_BUCKET = bucket
    settings.S3_ENDPOINT_URL = server.endpoint_url
    settings.S3_REGION = server.region
    settings.S3_ACCESS_KEY_ID = server.access_key_id
    settings.S3_SECRET_ACCESS_KEY = server.secret_access_key


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest, world: Any, settings: Any, tmp_path: Any) -> Any:
    # After `world`, which points storage at local disk.
    from adapters.storage import get_storage

    if request.param == "s3":
        s3 = request.getfixturevalue("s3_storage")
        use_s3(settings, request.getfixturevalue("s3_server"), s3.bucket)
    else:
        settings.ADAPTER_STORAGE_BACKEND = "local"
        settings.ADAPTER_STORAGE_ROOT = str(tmp_path / "storage")
    return get_storage()


@pytest.fixture
def s3_backend(world: Any, settings: Any, s3_server: Any, s3_storage: Any) -> Any:
    from adapters.storage import get_storage

    use_s3(settings, s3_server, s3_storage.bucket)
    return get_storage()
