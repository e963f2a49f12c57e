"""The portal's own strict reader of a safetensors header: layout only, never tensor data.

The format: 8 bytes little-endian header length N, N bytes of JSON, then the data section.
Every rule the reference implementation enforces is enforced here too, plus the ones it is lax
about (duplicate keys, NaN literals, trailing bytes are checked at the end of the stream).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from adapters.validation.codes import Issue, issue
from adapters.validation.strict_json import StrictJSONError, check_string, loads_strict

# Byte sizes of the byte-aligned dtypes of safetensors; sub-byte ones (F4, F6_*) are not known.
DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "C64": 8,
}
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}
_U64_MAX = 2**64 - 1
# safetensors allows any rank; real tensors have a handful of dimensions (LoRA ones have 2, which
# the tensor checks demand). Refusing longer shapes here bounds the work per entry.
MAX_DIMS = 8


class HeaderError(Exception):
    """The header is unusable; carries the one Issue that says why."""

    def __init__(self, found: Issue) -> None:
        super().__init__(found.message)
        self.issue = found


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offsets are relative to the start of the data section
    end: int

    @property
    def itemsize(self) -> int:
        return DTYPE_SIZES[self.dtype]


@dataclass(frozen=True)
class SafetensorsHeader:
    header_length: int
    metadata: dict[str, str]
    tensors: tuple[TensorEntry, ...]  # in data-offset order

    @property
    def data_start(self) -> int:
        return 8 + self.header_length

    @property
    def data_length(self) -> int:
        return self.tensors[-1].end if self.tensors else 0

    @property
    def file_size(self) -> int:
        """The exact size the file must have: nothing may follow the last tensor."""
        return self.data_start + self.data_length


def read_header_length(prefix: bytes, *, max_header_bytes: int) -> int:
    """Decode the 8-byte length prefix; `prefix` is what the file had (maybe fewer bytes)."""
    if len(prefix) < 8:
        raise HeaderError(issue("safetensors.too_short", size=len(prefix)))
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > max_header_bytes:
        raise HeaderError(
            issue("safetensors.header_too_large", length=length, limit=max_header_bytes)
        )
    return int(length)


def parse_header(raw: bytes) -> SafetensorsHeader:
    """Parse and check the JSON header bytes (exactly N bytes, after the prefix)."""
    try:
        # No generic walk: the checks below accept only the fixed shape of a header (nesting
        # of 3) and check every string they keep, which is linear in the header's size.
        document = loads_strict(raw, check_values=False)
        if isinstance(document, dict):
            for name, value in document.items():
                check_string(name)
                if name == "__metadata__" and isinstance(value, dict):
                    for item in (*value, *value.values()):
                        if isinstance(item, str):
                            check_string(item)
    except StrictJSONError as exc:
        code = {
            "not_utf8": "safetensors.header_not_utf8",
            "duplicate_key": "safetensors.header_duplicate_key",
            "nan_literal": "safetensors.header_nan_literal",
        }.get(exc.kind, "safetensors.header_invalid_json")
        raise HeaderError(
            issue(code, reason=exc.detail, key=exc.key, literal=exc.literal)
        ) from None
    if not isinstance(document, dict):
        raise HeaderError(issue("safetensors.header_not_object", kind=type(document).__name__))
    metadata = _metadata(document.pop("__metadata__", {}))
    entries = [_entry(name, value) for name, value in document.items()]
    entries.sort(key=lambda e: (e.begin, e.end))
    _check_layout(entries)
    return SafetensorsHeader(header_length=len(raw), metadata=metadata, tensors=tuple(entries))


def _metadata(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise HeaderError(issue("safetensors.metadata_invalid", reason="not an object"))
    for key, item in value.items():
        if not isinstance(item, str):
            raise HeaderError(
                issue(
                    "safetensors.metadata_invalid", reason=f"value of {key[:60]!r} is not a string"
                )
            )
    return dict(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry(name: str, value: object) -> TensorEntry:
    if not isinstance(value, dict):
        raise HeaderError(
            issue("safetensors.tensor_entry_invalid", name=name, reason="not an object")
        )
    if set(value) != _ENTRY_KEYS:
        found = sorted(value)
        raise HeaderError(
            issue("safetensors.tensor_entry_invalid", name=name, reason=f"has keys {found}")
        )
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise HeaderError(issue("safetensors.unknown_dtype", name=name, dtype=dtype))
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(_is_int(d) and 0 <= d <= _U64_MAX for d in shape)
    ):
        raise HeaderError(issue("safetensors.shape_invalid", name=name, shape=shape))
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(_is_int(o) for o in offsets)
        and 0 <= offsets[0] <= offsets[1] <= _U64_MAX
    ):
        raise HeaderError(issue("safetensors.offsets_invalid", name=name, offsets=offsets))
    nbytes = _byte_size(shape, DTYPE_SIZES[dtype])
    if nbytes is None:
        raise HeaderError(issue("safetensors.size_overflow", name=name, shape=shape))
    begin, end = offsets
    if end - begin != nbytes:
        raise HeaderError(
            issue(
                "safetensors.offsets_size_mismatch", name=name, actual=end - begin, expected=nbytes
            )
        )
    return TensorEntry(name=name, dtype=dtype, shape=tuple(shape), begin=begin, end=end)


def _byte_size(shape: list[int], itemsize: int) -> int | None:
    """The tensor's size in bytes, or None past u64: the reference reader multiplies in u64
    and fails on overflow. A zero anywhere makes it empty; otherwise every partial product
    stays within u64, so no step multiplies numbers larger than 128 bits."""
    if 0 in shape:
        return 0
    size = itemsize
    for dim in shape:
        size *= dim
        if size > _U64_MAX:
            return None
    return size


def _check_layout(entries: list[TensorEntry]) -> None:
    """Sorted by offset, tensors must tile the data section from 0 with no gap and no overlap."""
    expected = 0
    previous: TensorEntry | None = None
    for entry in entries:
        if entry.begin < expected and previous is not None:
            raise HeaderError(
                issue("safetensors.offsets_overlap", name=entry.name, other=previous.name)
            )
        if entry.begin > expected:
            raise HeaderError(
                issue(
                    "safetensors.offsets_not_contiguous",
                    name=entry.name,
                    expected=expected,
                    found=entry.begin,
                )
            )
        expected = entry.end
        previous = entry
