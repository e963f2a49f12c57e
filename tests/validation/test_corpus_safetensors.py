"""Malformed safetensors files: each rejected with its code, never a crash."""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.validation.builders import (
    WEIGHTS,
    Case,
    poke,
    read_safetensors,
    rewrite_header,
    rewrite_header_text,
    run_case,
    tensor_key,
    write_raw_safetensors,
)

Q_A = tensor_key(0, "q_proj", "A")
V_A = tensor_key(0, "v_proj", "A")


def _write(data: bytes):
    def build(adapter: Path) -> None:
        (adapter / WEIGHTS).write_bytes(data)

    return build


def _raw_header(header: bytes, *, length: int | None = None):
    def build(adapter: Path) -> None:
        _, data = read_safetensors(adapter / WEIGHTS)
        write_raw_safetensors(adapter / WEIGHTS, header, data, length=length)

    return build


def _entry(name: str, **changes):
    def build(adapter: Path) -> None:
        rewrite_header(adapter, lambda h: h[name].update(changes))

    return build


def _text(old: str, new: str):
    def build(adapter: Path) -> None:
        rewrite_header_text(adapter, lambda text: text.replace(old, new, 1))

    return build


def _shift_all(adapter: Path) -> None:
    """Every offset +4 and 4 more bytes at the start: a gap before the first tensor."""
    weights = adapter / WEIGHTS
    header, data = read_safetensors(weights)
    for name, entry in header.items():
        if name != "__metadata__":
            entry["data_offsets"] = [o + 4 for o in entry["data_offsets"]]
    write_raw_safetensors(weights, json.dumps(header).encode(), b"\0" * 4 + data)


def _overlap(adapter: Path) -> None:
    rewrite_header(adapter, lambda h: h[V_A].update(data_offsets=h[Q_A]["data_offsets"]))


def _duplicate_key(adapter: Path) -> None:
    weights = adapter / WEIGHTS
    header, data = read_safetensors(weights)
    text = json.dumps(header)
    text = text[:-1] + f', "{Q_A}": ' + json.dumps(header[Q_A]) + "}"
    write_raw_safetensors(weights, text.encode(), data)


def _truncate(n: int):
    def build(adapter: Path) -> None:
        raw = (adapter / WEIGHTS).read_bytes()
        (adapter / WEIGHTS).write_bytes(raw[:-n])

    return build


def _append(extra: bytes):
    def build(adapter: Path) -> None:
        with open(adapter / WEIGHTS, "ab") as handle:
            handle.write(extra)

    return build


def _poke(tensor: str, element: int, raw: bytes):
    def build(adapter: Path) -> None:
        poke(adapter, tensor, element, raw)

    return build


def _empty_header(adapter: Path) -> None:
    write_raw_safetensors(adapter / WEIGHTS, b"{}", b"")


def _deep_nesting(adapter: Path) -> None:
    _, data = read_safetensors(adapter / WEIGHTS)
    write_raw_safetensors(
        adapter / WEIGHTS, b'{"__metadata__":' + b"[" * 50_000 + b"]" * 50_000 + b"}", data
    )


NAN_F32 = struct.pack("<f", float("nan"))
INF_F32 = struct.pack("<f", float("inf"))
CASES = [
    Case("empty file", _write(b""), "safetensors.too_short"),
    Case("5 bytes", _write(b"\x01\x02\x03\x04\x05"), "safetensors.too_short"),
    Case("header length 2**40", _raw_header(b"{}", length=2**40), "safetensors.header_too_large"),
    Case(
        "header length 2**64-1",
        _raw_header(b"{}", length=2**64 - 1),
        "safetensors.header_too_large",
    ),
    Case(
        "header length past the end",
        _write(struct.pack("<Q", 4096) + b'{"a":1}'),
        "safetensors.header_truncated",
    ),
    Case("header not utf-8", _raw_header(b'{"\xff\xfe": 1}'), "safetensors.header_not_utf8"),
    Case("header overlong utf-8", _raw_header(b'{"\xc0\xaf": 1}'), "safetensors.header_not_utf8"),
    Case("header invalid json", _raw_header(b'{"a": '), "safetensors.header_invalid_json"),
    Case("header with a BOM", _raw_header(b"\xef\xbb\xbf{}"), "safetensors.header_invalid_json"),
    Case("header nested 50k deep", _deep_nesting, "safetensors.header_invalid_json"),
    Case(
        "header number of 5000 digits",
        _text('"data_offsets": [0,', '"data_offsets": [' + "9" * 5000 + ","),
        "safetensors.header_invalid_json",
    ),
    Case("header is a list", _raw_header(b"[1, 2]"), "safetensors.header_not_object"),
    Case("header is a string", _raw_header(b'"x"'), "safetensors.header_not_object"),
    Case("duplicate tensor key", _duplicate_key, "safetensors.header_duplicate_key"),
    Case(
        "NaN literal",
        _text('"data_offsets": [0,', '"data_offsets": [NaN,'),
        "safetensors.header_nan_literal",
    ),
    Case(
        "-Infinity literal",
        _text('"format": "pt"', '"format": -Infinity'),
        "safetensors.header_nan_literal",
    ),
    Case(
        "metadata value not a string",
        _text('"format": "pt"', '"format": 1'),
        "safetensors.metadata_invalid",
    ),
    Case("metadata is a list", _text('{"format": "pt"}', '["pt"]'), "safetensors.metadata_invalid"),
    Case("entry with an extra key", _entry(Q_A, extra=1), "safetensors.tensor_entry_invalid"),
    Case(
        "entry is a list",
        lambda a: rewrite_header(a, lambda h: h.update({Q_A: [1]})),
        "safetensors.tensor_entry_invalid",
    ),
    Case("unknown dtype", _entry(Q_A, dtype="F7"), "safetensors.unknown_dtype"),
    Case("sub-byte dtype F4", _entry(Q_A, dtype="F4"), "safetensors.unknown_dtype"),
    Case("integer dtype of the same size", _entry(Q_A, dtype="I32"), "tensors.dtype_not_float"),
    Case("negative dim", _entry(Q_A, shape=[-4, -128]), "safetensors.shape_invalid"),
    Case("float dim", _entry(Q_A, shape=[4.0, 128]), "safetensors.shape_invalid"),
    Case("3-D shape", _entry(Q_A, shape=[4, 128, 1]), "tensors.not_2d"),
    Case("1-D shape", _entry(Q_A, shape=[512]), "tensors.not_2d"),
    Case("shape overflowing u64", _entry(Q_A, shape=[2**40, 2**40]), "safetensors.size_overflow"),
    Case("offsets reversed", _entry(Q_A, data_offsets=[2048, 0]), "safetensors.offsets_invalid"),
    Case("offsets past u64", _entry(Q_A, data_offsets=[0, 2**64]), "safetensors.offsets_invalid"),
    Case(
        "offsets are booleans",
        _entry(Q_A, data_offsets=[False, True]),
        "safetensors.offsets_invalid",
    ),
    Case(
        "offsets of 3 numbers", _entry(Q_A, data_offsets=[0, 1, 2]), "safetensors.offsets_invalid"
    ),
    Case(
        "offsets one byte short",
        _entry(Q_A, data_offsets=[0, 2047]),
        "safetensors.offsets_size_mismatch",
    ),
    Case("gap before the first tensor", _shift_all, "safetensors.offsets_not_contiguous"),
    Case("two tensors overlap", _overlap, "safetensors.offsets_overlap"),
    Case("file truncated", _truncate(8), "safetensors.offsets_out_of_bounds"),
    Case("bytes after the last tensor", _append(b"\0" * 16), "safetensors.trailing_bytes"),
    Case(
        "pickle after the last tensor",
        _append(pickle.dumps({"a": 1})),
        "safetensors.trailing_bytes",
    ),
    Case("empty header", _empty_header, "tensors.none"),
    Case("NaN in F32", _poke(Q_A, 5, NAN_F32), "tensors.nonfinite"),
    Case("Inf in F32", _poke(V_A, 0, INF_F32), "tensors.nonfinite"),
    Case(
        "-Inf in F16",
        _poke(Q_A, 3, np.array([-np.inf], "<f2").tobytes()),
        "tensors.nonfinite",
        {"dtype": "float16"},
    ),
    Case(
        "NaN in F16",
        _poke(V_A, 17, np.array([np.nan], "<f2").tobytes()),
        "tensors.nonfinite",
        {"dtype": "float16"},
    ),
    Case("NaN in BF16", _poke(Q_A, 9, b"\xc0\x7f"), "tensors.nonfinite", {"dtype": "bfloat16"}),
    Case("Inf in BF16", _poke(V_A, 1, b"\x80\x7f"), "tensors.nonfinite", {"dtype": "bfloat16"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_weights_are_rejected_with_their_code(case: Case, tmp_path: Path) -> None:
    report = run_case(case, tmp_path)
    assert not report.valid
    assert case.code in report.error_codes, report.error_codes


def test_the_last_element_of_the_last_tensor_is_checked(tmp_path: Path) -> None:
    case = Case("last", lambda a: None, "tensors.nonfinite")
    adapter = tmp_path / "adapter"
    from tests.validation.builders import good_adapter, validate

    good_adapter(adapter)
    header, _ = read_safetensors(adapter / WEIGHTS)
    last = max(
        (k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][1]
    )
    count = int(np.prod(header[last]["shape"]))
    poke(adapter, last, count - 1, NAN_F32)
    report = validate(adapter)
    assert report.error_codes == [case.code]
    assert last in report.errors[0].message
