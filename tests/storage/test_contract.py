"""The storage contract, run against the local disk and the S3 server alike."""

from __future__ import annotations

import hashlib
import io

import pytest

from adapters.storage import (
    AdapterStorage,
    IntegrityMismatch,
    NotFound,
    quarantine_key,
    serving_key,
)
from tests.storage.probes import leftovers
from tests.storage.streams import GeneratedStream, MiB, generated_bytes

CONFIG = quarantine_key("acme", "support", 3, "up1", "adapter_config.json")
MODEL = quarantine_key("acme", "support", 3, "up1", "adapter_model.safetensors")


def test_it_round_trips_bytes_and_hashes_like_hashlib(storage: AdapterStorage) -> None:
    data = generated_bytes(3 * MiB + 17)

    stored = storage.save_stream(MODEL, io.BytesIO(data), max_bytes=len(data))

    assert stored.key == MODEL
    assert stored.size == len(data)
    assert stored.sha256 == hashlib.sha256(data).hexdigest()
    with storage.open(MODEL) as stream:
        assert stream.read() == data
    assert storage.exists(MODEL)
    assert storage.size(MODEL) == len(data)


def test_it_takes_short_reads_as_more_to_come(storage: AdapterStorage) -> None:
    source = GeneratedStream(2 * MiB + 5, max_read=4096 + 3)

    stored = storage.save_stream(MODEL, source, max_bytes=10 * MiB)

    assert stored.size == 2 * MiB + 5
    assert stored.sha256 == source.sha256


def test_it_stores_an_empty_file(storage: AdapterStorage) -> None:
    stored = storage.save_stream(CONFIG, io.BytesIO(b""), max_bytes=0)

    assert (stored.size, stored.sha256) == (0, hashlib.sha256(b"").hexdigest())
    assert storage.size(CONFIG) == 0


def test_it_accepts_exactly_max_bytes(storage: AdapterStorage) -> None:
    stored = storage.save_stream(CONFIG, io.BytesIO(b"x" * 1000), max_bytes=1000)

    assert stored.size == 1000


def test_it_replaces_an_object_whole(storage: AdapterStorage) -> None:
    storage.save_stream(CONFIG, io.BytesIO(b"old" * 1000), max_bytes=10_000)
    storage.save_stream(CONFIG, io.BytesIO(b"new"), max_bytes=10_000)

    with storage.open(CONFIG) as stream:
        assert stream.read() == b"new"


def test_it_reads_in_pieces(storage: AdapterStorage) -> None:
    data = generated_bytes(3 * MiB)
    storage.save_stream(MODEL, io.BytesIO(data), max_bytes=len(data))

    with storage.open(MODEL) as stream:
        pieces = []
        while piece := stream.read(100_000):
            assert len(piece) <= 100_000
            pieces.append(piece)

    assert b"".join(pieces) == data


def test_missing_objects_are_not_found(storage: AdapterStorage) -> None:
    assert not storage.exists(MODEL)
    with pytest.raises(NotFound) as error:
        storage.open(MODEL)
    assert error.value.code == "storage.not_found"
    with pytest.raises(NotFound):
        storage.size(MODEL)
    with pytest.raises(NotFound):
        storage.copy(MODEL, serving_key("0" * 64, "adapter_model.safetensors"))
    assert leftovers(storage) == []


def test_a_folder_is_not_an_object(storage: AdapterStorage) -> None:
    storage.save_stream(MODEL, io.BytesIO(b"x"), max_bytes=1)

    assert not storage.exists("quarantine/acme/support")
    with pytest.raises(NotFound):
        storage.open("quarantine/acme/support")


def test_delete_removes_the_object_and_tolerates_absence(storage: AdapterStorage) -> None:
    storage.save_stream(MODEL, io.BytesIO(b"x"), max_bytes=1)

    storage.delete(MODEL)
    storage.delete(MODEL)

    assert not storage.exists(MODEL)
    assert leftovers(storage) == []


def test_list_returns_sorted_keys_under_whole_segments(storage: AdapterStorage) -> None:
    keys = [
        quarantine_key("acme", "support", 1, "u1", "adapter_model.safetensors"),
        quarantine_key("acme", "support", 1, "u1", "adapter_config.json"),
        quarantine_key("acme", "support-2", 1, "u1", "adapter_config.json"),
        quarantine_key("beta", "support", 1, "u1", "adapter_config.json"),
    ]
    for key in keys:
        storage.save_stream(key, io.BytesIO(b"{}"), max_bytes=2)

    assert storage.list("quarantine/acme/support/") == sorted(keys[:2])
    assert storage.list("quarantine/") == sorted(keys)
    assert storage.list("serving/") == []
    assert storage.list("quarantine/nobody/") == []


def test_delete_prefix_removes_only_that_subtree(storage: AdapterStorage) -> None:
    mine = [quarantine_key("acme", "support", 1, "u1", n) for n in ("a.json", "b.safetensors")]
    neighbour = quarantine_key("acme", "support-2", 1, "u1", "a.json")
    for key in [*mine, neighbour]:
        storage.save_stream(key, io.BytesIO(b"{}"), max_bytes=2)

    assert storage.delete_prefix("quarantine/acme/support/") == 2

    assert storage.list("quarantine/") == [neighbour]
    assert storage.delete_prefix("quarantine/acme/support/") == 0


def test_copy_makes_an_independent_identical_object(storage: AdapterStorage) -> None:
    data = generated_bytes(2 * MiB + 1)
    stored = storage.save_stream(MODEL, io.BytesIO(data), max_bytes=len(data))
    target = serving_key(stored.sha256, "adapter_model.safetensors")

    storage.copy(MODEL, target)
    storage.delete(MODEL)

    assert storage.verify_object(target, len(data), stored.sha256) == stored.__class__(
        target, len(data), stored.sha256
    )


def test_verify_object_reports_size_and_hash_mismatches(storage: AdapterStorage) -> None:
    data = b"adapter bytes"
    stored = storage.save_stream(MODEL, io.BytesIO(data), max_bytes=100)

    with pytest.raises(IntegrityMismatch) as size_error:
        storage.verify_object(MODEL, len(data) + 1, stored.sha256)
    with pytest.raises(IntegrityMismatch) as hash_error:
        storage.verify_object(MODEL, len(data), hashlib.sha256(b"other").hexdigest())

    assert size_error.value.code == "storage.size_mismatch"
    assert hash_error.value.code == "storage.sha256_mismatch"
    assert storage.exists(MODEL)  # verifying never deletes; the caller decides


def test_download_to_streams_to_a_local_file(storage: AdapterStorage, tmp_path) -> None:
    data = generated_bytes(3 * MiB + 3)
    stored = storage.save_stream(MODEL, io.BytesIO(data), max_bytes=len(data))
    target = tmp_path / "node" / "acme--support--v3" / "adapter_model.safetensors"

    result = storage.download_to(MODEL, target, expected_sha256=stored.sha256)

    assert target.read_bytes() == data
    assert (result.size, result.sha256) == (len(data), stored.sha256)


def test_download_to_refuses_a_wrong_hash_and_leaves_no_file(
    storage: AdapterStorage, tmp_path
) -> None:
    storage.save_stream(MODEL, io.BytesIO(b"real bytes"), max_bytes=100)
    target = tmp_path / "node" / "adapter_model.safetensors"

    with pytest.raises(IntegrityMismatch) as error:
        storage.download_to(MODEL, target, expected_sha256=hashlib.sha256(b"x").hexdigest())

    assert error.value.code == "storage.sha256_mismatch"
    assert list(target.parent.iterdir()) == []


def test_download_to_of_a_missing_object_leaves_no_file(storage: AdapterStorage, tmp_path) -> None:
    target = tmp_path / "node" / "adapter_model.safetensors"

    with pytest.raises(NotFound):
        storage.download_to(MODEL, target)

    assert not target.exists()
