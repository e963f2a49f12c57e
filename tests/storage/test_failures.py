"""Failed writes leave nothing behind: no object, no temp file, no folder, no pending upload."""

from __future__ import annotations

import io

import pytest

from adapters.storage import AdapterStorage, SourceFailed, TooLarge, quarantine_key
from tests.storage.probes import leftovers
from tests.storage.streams import BreakingStream, GeneratedStream, MiB

GiB = 1024 * MiB
KEY = quarantine_key("acme", "support", 1, "up1", "adapter_model.safetensors")


@pytest.mark.parametrize(
    "total, max_bytes",
    [
        (1001, 1000),  # over by one byte inside the first chunk
        (3 * MiB, 2 * MiB + 1),  # over after some chunks were written
        (20 * MiB, 17 * MiB),  # over after whole S3 parts were uploaded
    ],
)
def test_it_refuses_a_stream_over_the_cap_and_keeps_nothing(
    storage: AdapterStorage, total: int, max_bytes: int
) -> None:
    source = GeneratedStream(total)

    with pytest.raises(TooLarge) as error:
        storage.save_stream(KEY, source, max_bytes=max_bytes)

    assert error.value.code == "storage.too_large"
    assert source.handed_out <= max_bytes + MiB  # stops reading at once, not at the end
    assert not storage.exists(KEY)
    assert leftovers(storage) == []


@pytest.mark.parametrize("fail_after", [0, 100, 3 * MiB, 17 * MiB + 5])
def test_a_source_failing_midway_keeps_nothing(storage: AdapterStorage, fail_after: int) -> None:
    with pytest.raises(SourceFailed) as error:
        storage.save_stream(KEY, BreakingStream(40 * MiB, fail_after=fail_after), max_bytes=GiB)

    assert error.value.code == "storage.source_failed"
    assert isinstance(error.value.__cause__, ConnectionResetError)
    assert leftovers(storage) == []


def test_a_failed_replace_keeps_the_old_object(storage: AdapterStorage) -> None:
    storage.save_stream(KEY, io.BytesIO(b"old"), max_bytes=10)

    with pytest.raises(TooLarge):
        storage.save_stream(KEY, io.BytesIO(b"x" * 20), max_bytes=10)

    with storage.open(KEY) as stream:
        assert stream.read() == b"old"


def test_a_text_source_is_refused(storage: AdapterStorage) -> None:
    with pytest.raises(SourceFailed):
        # The point: a text stream (str chunks) gets past the types only at run time.
        storage.save_stream(KEY, io.StringIO("text"), max_bytes=10)  # type: ignore[arg-type]

    assert leftovers(storage) == []


def test_an_interrupt_midway_keeps_nothing(storage: AdapterStorage) -> None:
    class Interrupted(GeneratedStream):
        def read(self, size: int = -1) -> bytes:
            if self.handed_out >= 9 * MiB:
                raise KeyboardInterrupt
            return super().read(size)

    with pytest.raises(KeyboardInterrupt):
        storage.save_stream(KEY, Interrupted(20 * MiB), max_bytes=GiB)

    assert leftovers(storage) == []
