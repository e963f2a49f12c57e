"""The single streaming pass over adapter_model.safetensors: header, layout, tensors, values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from adapters.validation.base_model import BaseModelSpec
from adapters.validation.codes import issue
from adapters.validation.crosscheck import crosscheck_header
from adapters.validation.files import WEIGHTS_NAME, pickle_reason
from adapters.validation.peft_config import LoraConfig
from adapters.validation.report import FileDigest, Recorder
from adapters.validation.safetensors_header import (
    HeaderError,
    SafetensorsHeader,
    parse_header,
    read_header_length,
)
from adapters.validation.scan import FileTooLarge, FiniteScanner, HashingReader
from adapters.validation.tensors import TensorSummary, check_tensors

# Checks that need a readable header; listed as skipped when it is not.
_NEED_HEADER = (
    "safetensors.library_crosscheck",
    "tensors.present",
    "tensors.names",
    "tensors.dtypes",
    "tensors.pairs",
    "tensors.shapes",
    "tensors.rank",
    "tensors.targets",
    "safetensors.extent",
    "tensors.finite",
)
_NO_TENSORS = TensorSummary(dtype=None, modules=())


@dataclass(frozen=True)
class ValidationLimits:
    max_config_bytes: int = 256 * 1024
    max_weights_bytes: int = 8 * 1024**3
    # ~7,000 tensor entries. The largest LoRA a Llama-family base allows (7 projections x 2
    # matrices x ~130 layers) needs ~250 KB; the cap bounds what a hostile header costs to read
    # (bench/validation_worst.py measures the worst case found at exactly this size).
    max_header_bytes: int = 1024**2
    chunk_size: int = 1024**2
    max_errors: int = 200
    scratch_dir: str | None = None  # where the sparse header copy for the cross-check goes


def scan_weights(
    stream: BinaryIO,
    *,
    spec: BaseModelSpec,
    config: LoraConfig | None,
    limits: ValidationLimits,
    buffer: memoryview,
    recorder: Recorder,
) -> tuple[FileDigest | None, TensorSummary]:
    """Returns the file's digest (None when it could not be read whole) and what it holds."""
    reader = HashingReader(stream, limit=limits.max_weights_bytes)
    summary = _NO_TENSORS
    try:
        header, head_bytes = _read_header(reader, limits, recorder)
        if header is None:
            reader.drain(buffer)  # still hash it: the report lists every file's sha256
        elif header.file_size > limits.max_weights_bytes:
            size_issue = issue(
                "file.too_large",
                name=WEIGHTS_NAME,
                limit=limits.max_weights_bytes,
                detail=f" (its header declares {header.file_size} bytes)",
            )
            recorder.record("files.weights_size", [size_issue])
            return None, summary
        else:
            recorder.record(
                "safetensors.library_crosscheck",
                crosscheck_header(head_bytes, header, scratch_dir=limits.scratch_dir),
            )
            summary = check_tensors(header, spec=spec, config=config, recorder=recorder)
            _stream_data(header, reader, limits, buffer, recorder)
    except FileTooLarge:
        recorder.record(
            "files.weights_size",
            [issue("file.too_large", name=WEIGHTS_NAME, limit=limits.max_weights_bytes, detail="")],
        )
        return None, summary
    recorder.record("files.weights_size", [])
    return FileDigest(WEIGHTS_NAME, reader.size, reader.hasher.hexdigest()), summary


def _read_header(
    reader: HashingReader, limits: ValidationLimits, recorder: Recorder
) -> tuple[SafetensorsHeader | None, bytes]:
    """The header and the file's first 8 + N bytes, or (None, b"") with the failure recorded."""
    prefix = reader.read(8)
    try:
        length: int | None = read_header_length(prefix, max_header_bytes=limits.max_header_bytes)
        length_error = None
    except HeaderError as exc:
        length, length_error = None, exc
    first = reader.read(1) if length else b""
    reason = pickle_reason(prefix + first)
    if not recorder.record(
        "files.weights_not_pickle",
        [issue("file.pickle_refused", name=WEIGHTS_NAME, reason=reason)] if reason else [],
    ):
        _skip_all(recorder, ("safetensors.header", *_NEED_HEADER))
        return None, b""
    try:
        if length_error is not None or length is None:
            raise length_error or HeaderError(issue("safetensors.too_short", size=len(prefix)))
        raw = first + reader.read(length - 1) if length else b""
        if len(raw) < length:
            raise HeaderError(
                issue("safetensors.header_truncated", length=length, available=len(raw))
            )
        header = parse_header(raw)
    except HeaderError as exc:
        recorder.record("safetensors.header", [exc.issue])
        _skip_all(recorder, _NEED_HEADER)
        return None, b""
    recorder.record("safetensors.header", [])
    return header, prefix + raw


def _skip_all(recorder: Recorder, names: tuple[str, ...]) -> None:
    for name in names:
        recorder.skip(name)


def _stream_data(
    header: SafetensorsHeader,
    reader: HashingReader,
    limits: ValidationLimits,
    buffer: memoryview,
    recorder: Recorder,
) -> None:
    scanner = FiniteScanner(header.tensors)
    trailing = 0
    while True:
        got = reader.readinto(buffer)
        if not got:
            break
        trailing += got - scanner.feed(buffer[:got])
    extent = []
    if scanner.position < header.data_length:
        extent.append(
            issue(
                "safetensors.offsets_out_of_bounds",
                available=scanner.position,
                declared=header.data_length,
            )
        )
    if trailing:
        extent.append(issue("safetensors.trailing_bytes", extra=trailing))
    recorder.record("safetensors.extent", extent)
    recorder.record(
        "tensors.finite", [issue("tensors.nonfinite", name=name) for name in scanner.nonfinite]
    )
