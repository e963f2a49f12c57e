"""Fuzzing: no bytes make the reader or the validator crash; every failure has a known code."""

from __future__ import annotations

import io
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.validation import CODES, validate_adapter
from adapters.validation.peft_config import check_config
from adapters.validation.report import FileDigest, Recorder
from adapters.validation.safetensors_header import HeaderError, parse_header, read_header_length
from adapters.validation.signatures import SignatureFailure, TrustedKey, verify_signature
from adapters.validation.strict_json import StrictJSONError, loads_strict
from tests.validation.builders import CONFIG, SPEC, WEIGHTS, good_adapter

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def good_files(tmp_path_factory) -> dict[str, bytes]:
    adapter = good_adapter(tmp_path_factory.mktemp("fuzz") / "a", dtype="bfloat16")
    return {name: (adapter / name).read_bytes() for name in (CONFIG, WEIGHTS)}


def _validate(config: bytes, weights: bytes):
    report = validate_adapter(
        {CONFIG: io.BytesIO(config), WEIGHTS: io.BytesIO(weights)}, base_model=SPEC, max_rank=64
    )
    assert all(code in CODES for code in report.error_codes)
    json.dumps(report.to_dict())
    return report


@FUZZ
@given(weights=st.binary(max_size=2048))
def test_random_bytes_as_weights_never_crash(good_files, weights: bytes) -> None:
    assert not _validate(good_files[CONFIG], weights).valid


@FUZZ
@given(data=st.data())
def test_mutated_headers_never_crash(good_files, data) -> None:
    weights = bytearray(good_files[WEIGHTS])
    (length,) = struct.unpack("<Q", weights[:8])
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, 8 + length - 1))
        weights[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):  # sometimes cut or extend too
        cut = data.draw(st.integers(0, len(weights)))
        weights = weights[:cut] + data.draw(st.binary(max_size=64))
    _validate(good_files[CONFIG], bytes(weights))


@FUZZ
@given(header=json_values)
def test_any_json_header_is_accepted_or_refused_with_a_code(header) -> None:
    raw = json.dumps(header).encode()
    try:
        parse_header(raw)
    except HeaderError as exc:
        assert exc.issue.code in CODES


@FUZZ
@given(prefix=st.binary(max_size=16))
def test_any_length_prefix_is_accepted_or_refused(prefix: bytes) -> None:
    try:
        assert read_header_length(prefix, max_header_bytes=1 << 20) <= 1 << 20
    except HeaderError as exc:
        assert exc.issue.code in ("safetensors.too_short", "safetensors.header_too_large")


@FUZZ
@given(raw=st.binary(max_size=256))
def test_strict_json_raises_only_its_own_error(raw: bytes) -> None:
    try:
        loads_strict(raw)
    except StrictJSONError as exc:
        assert exc.kind in ("not_utf8", "invalid", "duplicate_key", "nan_literal")


@FUZZ
@given(
    config=st.fixed_dictionaries(
        {},
        optional={
            key: json_values
            for key in (
                "peft_type",
                "r",
                "lora_alpha",
                "bias",
                "use_dora",
                "use_rslora",
                "modules_to_save",
                "target_modules",
                "base_model_name_or_path",
                "rank_pattern",
                "init_lora_weights",
            )
        },
    )
)
def test_any_config_values_are_checked_without_crashing(config) -> None:
    recorder = Recorder()
    check_config(config, spec=SPEC, max_rank=64, recorder=recorder)
    assert all(e.code in CODES for e in recorder.errors)


@FUZZ
@given(signature=st.binary(max_size=512) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_signature_bytes_fail_with_a_code(signature: bytes) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = (
        ec.derive_private_key(7, ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    files = [FileDigest(CONFIG, 1, "0" * 64), FileDigest(WEIGHTS, 1, "1" * 64)]
    with pytest.raises(SignatureFailure) as caught:
        verify_signature(signature, files, [TrustedKey("k", pem)])
    assert caught.value.issue.code in CODES


def test_fuzz_corpus_has_a_good_starting_point(good_files) -> None:
    """The mutations start from a valid file, so the fuzzer explores near-valid headers."""
    assert _validate(good_files[CONFIG], good_files[WEIGHTS]).valid
