"""What is particular to the S3 backend: how it talks to the server, and how failures read."""

from __future__ import annotations

import hashlib
import io

import boto3
import pytest
from botocore.config import Config

from adapters.storage import BackendError, StorageMisconfigured, quarantine_key, serving_key
from adapters.storage.s3 import S3Storage
from tests.storage.probes import S3Calls, leftovers
from tests.storage.streams import GeneratedStream, MiB, generated_bytes

pytestmark = pytest.mark.s3

KEY = quarantine_key("acme", "support", 1, "up1", "adapter_model.safetensors")


def test_a_small_stream_is_one_put(s3_storage: S3Storage) -> None:
    calls = S3Calls(s3_storage.client)

    s3_storage.save_stream(KEY, io.BytesIO(b"x" * MiB), max_bytes=MiB)

    assert calls.names == ["PutObject"]


def test_a_large_stream_goes_up_part_by_part(s3_storage: S3Storage) -> None:
    calls = S3Calls(s3_storage.client)
    source = GeneratedStream(20 * MiB + 1)

    stored = s3_storage.save_stream(KEY, source, max_bytes=100 * MiB)

    assert calls.names == [
        "CreateMultipartUpload",
        "UploadPart",
        "UploadPart",
        "UploadPart",
        "CompleteMultipartUpload",
    ]
    assert stored.sha256 == source.sha256
    assert s3_storage.verify_object(KEY, stored.size, stored.sha256)


def test_the_part_size_grows_so_the_cap_fits_in_10000_parts(s3_storage: S3Storage) -> None:
    assert s3_storage._part_size_for(10 * MiB) == 8 * MiB
    assert s3_storage._part_size_for(200 * 1024 * MiB) == 21 * MiB


def test_copy_is_server_side(s3_storage: S3Storage) -> None:
    data = generated_bytes(3 * MiB)
    stored = s3_storage.save_stream(KEY, io.BytesIO(data), max_bytes=len(data))
    target = serving_key(stored.sha256, "adapter_model.safetensors")
    calls = S3Calls(s3_storage.client)

    s3_storage.copy(KEY, target)

    assert "GetObject" not in calls.names and "PutObject" not in calls.names
    assert calls.count("CopyObject") == 1
    assert s3_storage.verify_object(target, len(data), stored.sha256)


def test_copy_above_the_single_copy_limit_goes_part_by_part(s3_server, s3_storage) -> None:
    storage = s3_server.storage(s3_storage.bucket, max_single_copy=6 * MiB, copy_part_size=5 * MiB)
    data = generated_bytes(12 * MiB + 7)
    stored = storage.save_stream(KEY, io.BytesIO(data), max_bytes=len(data))
    target = serving_key(stored.sha256, "adapter_model.safetensors")
    calls = S3Calls(storage.client)

    storage.copy(KEY, target)

    assert calls.count("UploadPartCopy") == 3
    assert "GetObject" not in calls.names
    assert storage.verify_object(target, len(data), hashlib.sha256(data).hexdigest())
    assert leftovers(storage) == sorted([KEY, target])


def test_a_missing_bucket_is_a_configuration_error(s3_server) -> None:
    storage = s3_server.storage("no-such-bucket-here")

    with pytest.raises(StorageMisconfigured) as error:
        storage.save_stream(KEY, io.BytesIO(b"x"), max_bytes=1)

    assert error.value.code == "storage.misconfigured"
    assert not error.value.retryable


def test_an_unreachable_server_is_a_retryable_backend_error(unused_tcp_port: int) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{unused_tcp_port}",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=2),
    )
    storage = S3Storage("bucket", client=client)

    with pytest.raises(BackendError) as error:
        storage.exists(KEY)

    assert error.value.retryable
    assert error.value.code == "storage.backend"
