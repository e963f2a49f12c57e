"""Direct-to-S3 multipart uploads: presigned part URLs, completion, and the portal's re-check."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from adapters.storage import (
    CompletedPart,
    DirectMultipartStorage,
    IntegrityMismatch,
    LocalDiskStorage,
    MultipartError,
    quarantine_key,
)
from tests.storage.probes import leftovers
from tests.storage.streams import MiB, generated_bytes

pytestmark = pytest.mark.s3

KEY = quarantine_key("acme", "support", 4, "direct1", "adapter_model.safetensors")
PART = 5 * MiB  # S3's minimum for every part but the last


def put_part(url: str, data: bytes) -> str:
    """What a browser or CLI does with a presigned URL: a plain PUT, keeping the ETag."""
    response = httpx.put(url, content=data, timeout=60)
    assert response.status_code == 200, response.text
    return response.headers["ETag"]


def upload_parts(storage, upload_id: str, parts: list[bytes]) -> list[CompletedPart]:
    done = []
    for number, data in enumerate(parts, start=1):
        url = storage.presign_part(KEY, upload_id, number, expires=300)
        done.append(CompletedPart(number, put_part(url, data)))
    return done


def test_only_s3_offers_direct_uploads(s3_storage, disk_storage: LocalDiskStorage) -> None:
    assert isinstance(s3_storage, DirectMultipartStorage)
    assert not isinstance(disk_storage, DirectMultipartStorage)


def test_presigned_parts_complete_into_a_verified_object(s3_storage) -> None:
    data = generated_bytes(2 * PART + 123_457, seed=3)
    chunks = [data[:PART], data[PART : 2 * PART], data[2 * PART :]]
    upload_id = s3_storage.create_multipart(KEY)

    parts = upload_parts(s3_storage, upload_id, chunks)
    # Clients may report parts in any order; the storage sorts them.
    size = s3_storage.complete_multipart(KEY, upload_id, list(reversed(parts)))

    assert size == len(data)
    stored = s3_storage.verify_object(KEY, len(data), hashlib.sha256(data).hexdigest())
    assert stored.sha256 == hashlib.sha256(data).hexdigest()
    assert leftovers(s3_storage) == [KEY]


def test_a_part_url_can_carry_its_signed_length(s3_storage) -> None:
    data = b"exactly this long"
    upload_id = s3_storage.create_multipart(KEY)
    url = s3_storage.presign_part(KEY, upload_id, 1, expires=60, content_length=len(data))

    # Real S3 enforces signed headers; moto does not check them, so check that it is signed.
    signed = parse_qs(urlsplit(url).query)["X-Amz-SignedHeaders"][0].split(";")
    assert "content-length" in signed
    etag = put_part(url, data)
    s3_storage.complete_multipart(KEY, upload_id, [CompletedPart(1, etag)])

    assert s3_storage.verify_object(KEY, len(data), hashlib.sha256(data).hexdigest())


def test_a_corrupted_part_is_caught_by_verification(s3_storage) -> None:
    data = generated_bytes(2 * PART + 10, seed=4)
    corrupted_middle = bytearray(data[PART : 2 * PART])
    corrupted_middle[1000] ^= 0xFF
    upload_id = s3_storage.create_multipart(KEY)
    parts = upload_parts(
        s3_storage, upload_id, [data[:PART], bytes(corrupted_middle), data[2 * PART :]]
    )
    s3_storage.complete_multipart(KEY, upload_id, parts)

    with pytest.raises(IntegrityMismatch) as error:
        s3_storage.verify_object(KEY, len(data), hashlib.sha256(data).hexdigest())

    assert error.value.code == "storage.sha256_mismatch"


def test_a_missing_part_is_caught_by_the_size_check(s3_storage) -> None:
    data = generated_bytes(PART + 10, seed=5)
    upload_id = s3_storage.create_multipart(KEY)
    parts = upload_parts(s3_storage, upload_id, [data[:PART]])
    s3_storage.complete_multipart(KEY, upload_id, parts)

    with pytest.raises(IntegrityMismatch) as error:
        s3_storage.verify_object(KEY, len(data), hashlib.sha256(data).hexdigest())

    assert error.value.code == "storage.size_mismatch"


def test_a_wrong_etag_is_refused_and_the_upload_can_be_aborted(s3_storage) -> None:
    upload_id = s3_storage.create_multipart(KEY)
    parts = upload_parts(s3_storage, upload_id, [generated_bytes(PART), b"tail"])

    with pytest.raises(MultipartError) as error:
        s3_storage.complete_multipart(
            KEY, upload_id, [parts[0], CompletedPart(2, '"' + "0" * 32 + '"')]
        )
    assert error.value.code == "storage.multipart_invalid"

    assert [p.upload_id for p in s3_storage.list_multipart_uploads("quarantine/")] == [upload_id]
    s3_storage.abort_multipart(KEY, upload_id)
    s3_storage.abort_multipart(KEY, upload_id)  # twice is fine

    assert s3_storage.list_multipart_uploads("quarantine/") == []
    assert leftovers(s3_storage) == []


def test_completing_an_unknown_upload_is_refused(s3_storage) -> None:
    with pytest.raises(MultipartError) as error:
        s3_storage.complete_multipart(KEY, "no-such-upload", [CompletedPart(1, '"abc"')])

    assert error.value.code == "storage.multipart_unknown"


@pytest.mark.parametrize(
    "parts",
    [
        [],
        [CompletedPart(1, '"a"'), CompletedPart(1, '"b"')],
        [CompletedPart(0, '"a"')],
        [CompletedPart(10_001, '"a"')],
        [CompletedPart(1, "")],
    ],
)
def test_malformed_part_lists_are_refused_before_s3(s3_storage, parts) -> None:
    upload_id = s3_storage.create_multipart(KEY)

    with pytest.raises(MultipartError) as error:
        s3_storage.complete_multipart(KEY, upload_id, parts)

    assert error.value.code == "storage.multipart_invalid"
    s3_storage.abort_multipart(KEY, upload_id)


@pytest.mark.parametrize(
    "part_number, expires, length",
    [(0, 60, None), (10_001, 60, None), (1, 0, None), (1, 8 * 86400, None), (1, 60, 0)],
)
def test_presign_refuses_out_of_range_values(
    s3_storage, part_number: int, expires: int, length: int | None
) -> None:
    upload_id = s3_storage.create_multipart(KEY)

    with pytest.raises(MultipartError):
        s3_storage.presign_part(KEY, upload_id, part_number, expires, content_length=length)

    s3_storage.abort_multipart(KEY, upload_id)


def test_delete_prefix_also_aborts_abandoned_uploads(s3_storage) -> None:
    upload_id = s3_storage.create_multipart(KEY)
    upload_parts(s3_storage, upload_id, [b"part one"])

    s3_storage.delete_prefix("quarantine/acme/support/")

    assert leftovers(s3_storage) == []
