"""A 300 MB stream goes through either backend with a small, size-independent memory peak.

Memory is measured with tracemalloc (every Python allocation, including botocore's buffers);
nothing here asserts on time.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from adapters.storage import AdapterStorage, quarantine_key, serving_key
from tests.storage.streams import GeneratedStream, MiB

SIZE = 300 * MiB
# One S3 part (8 MiB) plus its copy for the request, a read chunk, and library overhead.
PEAK_LIMIT = 40 * MiB
T = TypeVar("T")


@pytest.fixture
def traced() -> Iterator[Callable[[Callable[[], T]], tuple[T, int]]]:
    tracemalloc.start()

    def run(action: Callable[[], T]) -> tuple[T, int]:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = action()
        return result, tracemalloc.get_traced_memory()[1] - before

    try:
        yield run
    finally:
        tracemalloc.stop()


def test_a_large_stream_is_stored_and_read_back_in_flat_memory(
    storage: AdapterStorage, traced, tmp_path
) -> None:
    key = quarantine_key("acme", "big", 1, "up1", "adapter_model.safetensors")
    source = GeneratedStream(SIZE, seed=7)

    stored, save_peak = traced(lambda: storage.save_stream(key, source, max_bytes=SIZE))
    assert (stored.size, stored.sha256) == (SIZE, source.sha256)
    assert save_peak < PEAK_LIMIT, f"saving held {save_peak / MiB:.1f} MiB"

    _, verify_peak = traced(lambda: storage.verify_object(key, SIZE, source.sha256))
    assert verify_peak < PEAK_LIMIT, f"verifying held {verify_peak / MiB:.1f} MiB"

    target = tmp_path / "node" / "adapter_model.safetensors"
    downloaded, download_peak = traced(lambda: storage.download_to(key, target))
    assert downloaded.sha256 == source.sha256
    assert target.stat().st_size == SIZE
    assert download_peak < PEAK_LIMIT, f"downloading held {download_peak / MiB:.1f} MiB"

    promoted = serving_key(source.sha256, "adapter_model.safetensors")
    _, copy_peak = traced(lambda: storage.copy(key, promoted))
    assert storage.size(promoted) == SIZE
    assert copy_peak < PEAK_LIMIT, f"copying held {copy_peak / MiB:.1f} MiB"
