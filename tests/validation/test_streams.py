"""Validation from file-like objects: any chunking, short reads, no readinto, bounded reads."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.validation import ValidationLimits, validate_adapter
from adapters.validation.safetensors_header import TensorEntry
from adapters.validation.scan import FiniteScanner
from tests.validation.builders import (
    CONFIG,
    SPEC,
    WEIGHTS,
    good_adapter,
    poke,
    tensor_key,
    validate,
)


class ShortReads(io.RawIOBase):
    """Hands out at most `step` bytes per call, like a slow socket."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data, self._pos, self._step = data, 0, step
        self.largest_request = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.largest_request = max(self.largest_request, len(buffer))
        chunk = self._data[self._pos : self._pos + min(self._step, len(buffer))]
        buffer[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


class ReadOnly:
    """An HTTP-body-like object: read(n) only, no readinto, no seek, no fileno."""

    def __init__(self, data: bytes) -> None:
        self._stream = io.BytesIO(data)
        self.largest_request = 0

    def read(self, n: int = -1) -> bytes:
        self.largest_request = max(self.largest_request, n)
        return self._stream.read(n)


def _streams(adapter: Path, wrap) -> dict:
    return {name: wrap((adapter / name).read_bytes()) for name in (CONFIG, WEIGHTS)}


@pytest.mark.parametrize(
    "wrap",
    [io.BytesIO, lambda d: ShortReads(d, 7), ReadOnly],
    ids=["BytesIO", "short-reads", "read-only"],
)
def test_streams_give_the_same_report_as_the_directory(tmp_path: Path, wrap) -> None:
    adapter = good_adapter(tmp_path / "a", dtype="bfloat16")
    from_dir = validate(adapter)
    from_streams = validate_adapter(_streams(adapter, wrap), base_model=SPEC, max_rank=64)
    assert from_streams.valid
    assert from_streams.files == from_dir.files
    assert from_streams.manifest_sha256 == from_dir.manifest_sha256


def test_reads_are_bounded_by_the_chunk_size(tmp_path: Path) -> None:
    """Never the whole file: each read asks for at most one chunk (or the header)."""
    adapter = good_adapter(
        tmp_path / "a", rank=64, target_modules=("gate_proj", "up_proj", "down_proj")
    )
    size = (adapter / WEIGHTS).stat().st_size
    limits = ValidationLimits(chunk_size=4096)
    # A raw stream (short reads, no buffering) stands in where a buffered one is typed.
    raw = ReadOnly((adapter / WEIGHTS).read_bytes())
    weights = cast(BinaryIO, raw)
    report = validate_adapter(
        {CONFIG: io.BytesIO((adapter / CONFIG).read_bytes()), WEIGHTS: weights},
        base_model=SPEC,
        max_rank=64,
        limits=limits,
    )
    assert report.valid and size > 100_000
    (header_length,) = struct.unpack("<Q", (adapter / WEIGHTS).read_bytes()[:8])
    assert raw.largest_request <= max(4096, header_length)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5, 8, 13, 4096])
@pytest.mark.parametrize("element", [0, 1, 255, 511])
def test_nan_is_found_whatever_the_chunk_boundaries(
    tmp_path: Path, chunk_size: int, element: int
) -> None:
    adapter = good_adapter(tmp_path / "a", dtype="float16")
    poke(adapter, tensor_key(1, "v_proj", "A"), element, np.array([np.nan], "<f2").tobytes())
    report = validate(adapter, limits=ValidationLimits(chunk_size=chunk_size))
    assert report.error_codes == ["tensors.nonfinite"]
    assert "layers.1.self_attn.v_proj.lora_A" in report.errors[0].message


@pytest.mark.parametrize("dtype", ["<f2", "<f4", "<f8"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_scanner_per_dtype_including_f64(dtype: str, bad: float) -> None:
    values = np.linspace(-1e3, 1e3, 1001).astype(dtype)
    code = {"<f2": "F16", "<f4": "F32", "<f8": "F64"}[dtype]
    clean = values.tobytes()
    values[500] = bad
    dirty = values.tobytes()
    edge = np.array([np.finfo(dtype).max, np.finfo(dtype).tiny, -0.0], dtype=dtype).tobytes()
    for data, expected in ((clean, []), (dirty, ["t"]), (edge, [])):
        entry = TensorEntry("t", code, (len(data) // np.dtype(dtype).itemsize,), 0, len(data))
        for chunk in (3, 64, len(data)):
            scanner = FiniteScanner([entry])
            view = memoryview(data)
            for start in range(0, len(data), chunk):
                scanner.feed(view[start : start + chunk])
            assert scanner.nonfinite == expected


def test_bf16_extremes_are_finite_and_nan_inf_are_not() -> None:
    # bf16 = the high half of f32: max finite 0x7F7F, +inf 0x7F80, NaN 0x7FC0, -inf 0xFF80.
    for bits, finite in (
        (0x7F7F, True),
        (0xFF7F, True),
        (0x0001, True),
        (0x7F80, False),
        (0x7FC0, False),
        (0xFF80, False),
        (0xFFFF, False),
    ):
        data = np.array([0x3F80, bits], dtype="<u2").tobytes()
        scanner = FiniteScanner([TensorEntry("t", "BF16", (2,), 0, 4)])
        scanner.feed(memoryview(data))
        assert (scanner.nonfinite == []) is finite, hex(bits)


def test_errors_raised_by_a_stream_reach_the_caller(tmp_path: Path) -> None:
    """A storage failure is the caller's to retry, never a verdict on the adapter."""

    class Failing(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            raise ConnectionResetError("peer went away")

    adapter = good_adapter(tmp_path / "a")
    with pytest.raises(ConnectionResetError):
        validate_adapter(
            {
                CONFIG: io.BytesIO((adapter / CONFIG).read_bytes()),
                WEIGHTS: cast(BinaryIO, Failing()),
            },
            base_model=SPEC,
            max_rank=64,
        )


def _one_by_one(code: str, patterns: np.ndarray) -> np.ndarray:
    """The scanner's verdict on every bit pattern, each fed as its own one-element tensor."""
    verdicts = []
    size = patterns.dtype.itemsize
    for bits in patterns:
        scanner = FiniteScanner([TensorEntry("t", code, (1,), 0, size)])
        scanner.feed(memoryview(bits.tobytes()))
        verdicts.append(not scanner.nonfinite)
    return np.array(verdicts)


def test_every_16_bit_pattern_is_judged_exactly() -> None:
    """Exhaustive: all 65536 F16 and BF16 values against the exponent-mask definition."""
    patterns = np.arange(1 << 16, dtype="<u2")
    f16_finite = np.isfinite(patterns.view("<f2"))
    bf16_finite = (patterns & 0x7F80) != 0x7F80
    assert (_one_by_one("F16", patterns) == f16_finite).all()
    assert (_one_by_one("BF16", patterns) == bf16_finite).all()


@given(bits=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
@settings(max_examples=300, deadline=None)
def test_f32_patterns_match_numpy(bits: list[int]) -> None:
    values = np.array(bits, dtype="<u4")
    scanner = FiniteScanner([TensorEntry("t", "F32", (len(bits),), 0, 4 * len(bits))])
    scanner.feed(memoryview(values.tobytes()))
    assert (scanner.nonfinite == []) == bool(np.isfinite(values.view("<f4")).all())


@given(bits=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=64))
@settings(max_examples=300, deadline=None)
def test_f64_patterns_match_numpy(bits: list[int]) -> None:
    values = np.array(bits, dtype="<u8")
    scanner = FiniteScanner([TensorEntry("t", "F64", (len(bits),), 0, 8 * len(bits))])
    scanner.feed(memoryview(values.tobytes()))
    assert (scanner.nonfinite == []) == bool(np.isfinite(values.view("<f8")).all())
