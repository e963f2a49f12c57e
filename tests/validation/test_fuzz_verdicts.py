"""Security class 1: any header or config JSON ends in a verdict with a known code, and what
the report carries fits the database (finite numbers, no NUL, a rank the rank column holds).

Hostile values: integers of any length, deep nesting, thousands of entries, wrong types
(tests/validation/hostile_json.py). Example counts stay small: the file runs in CI's budget.
"""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.validation import CODES, validate_adapter
from tests.validation.builders import CONFIG, SPEC, WEIGHTS, good_adapter
from tests.validation.hostile_json import configs, headers, weights_with

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
MAX_RANK = 64


@pytest.fixture(scope="module")
def good_files(tmp_path_factory) -> dict[str, bytes]:
    adapter = good_adapter(tmp_path_factory.mktemp("verdicts") / "a")
    return {name: (adapter / name).read_bytes() for name in (CONFIG, WEIGHTS)}


def assert_storable_verdict(config: bytes, weights: bytes) -> None:
    report = validate_adapter(
        {CONFIG: io.BytesIO(config), WEIGHTS: io.BytesIO(weights)},
        base_model=SPEC,
        max_rank=MAX_RANK,
    )
    assert report.valid or report.errors
    assert set(report.error_codes) <= set(CODES)
    # What the task writes: the report as JSON, rank and alpha in their columns.
    stored = json.dumps(report.to_dict(), allow_nan=False)
    assert "\\u0000" not in stored
    assert report.rank is None or 1 <= report.rank <= MAX_RANK
    assert report.alpha is None or 0 < report.alpha < float("inf")


@FUZZ
@given(header=headers(), data=st.binary(max_size=64))
def test_any_header_json_ends_in_a_storable_verdict(good_files, header: str, data: bytes) -> None:
    assert_storable_verdict(good_files[CONFIG], weights_with(header, data))


@FUZZ
@given(data=st.data())
def test_any_config_json_ends_in_a_storable_verdict(good_files, data) -> None:
    config = data.draw(configs(json.loads(good_files[CONFIG])))
    assert_storable_verdict(config.encode("utf-8", "surrogatepass"), good_files[WEIGHTS])


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"r": 10**30}, "config.invalid_json"),  # more digits than any real number needs
        ({"r": 10**18}, "config.rank_too_high"),  # fits the JSON rule, not the rank column
        ({"lora_alpha": 10**19}, None),  # large but finite: a float column holds it
        ({"lora_dropout": float("inf")}, "config.nan_literal"),
    ],
)
def test_numbers_in_the_config_end_in_a_verdict_that_fits_the_columns(
    good_files, changes, code
) -> None:
    config = {**json.loads(good_files[CONFIG]), **changes}
    report = validate_adapter(
        {CONFIG: io.BytesIO(json.dumps(config).encode()), WEIGHTS: io.BytesIO(good_files[WEIGHTS])},
        base_model=SPEC,
        max_rank=MAX_RANK,
    )
    assert report.error_codes[:1] == ([code] if code else [])
    assert report.rank is None or report.rank <= MAX_RANK


def test_a_number_that_overflows_a_float_is_refused_wherever_it_is(good_files) -> None:
    config = good_files[CONFIG].rstrip()[:-1] + b', "notes": {"scale": 1e400}}'
    report = validate_adapter(
        {CONFIG: io.BytesIO(config), WEIGHTS: io.BytesIO(good_files[WEIGHTS])},
        base_model=SPEC,
        max_rank=MAX_RANK,
    )
    assert report.error_codes == ["config.invalid_json"]
    assert report.config is None  # so no Infinity reaches the jsonb column


def test_a_shape_of_many_huge_dims_is_refused_before_it_is_multiplied(good_files) -> None:
    # Before the dims cap, 1,800 dims of 4,299 digits took minutes of big-integer products.
    dims = ",".join(["9" * 20] * 1_800)
    header = '{"t":{"dtype":"F32","shape":[' + dims + '],"data_offsets":[0,4]}}'
    report = validate_adapter(
        {
            CONFIG: io.BytesIO(good_files[CONFIG]),
            WEIGHTS: io.BytesIO(weights_with(header, b"\0" * 4)),
        },
        base_model=SPEC,
        max_rank=MAX_RANK,
    )
    assert report.error_codes == ["safetensors.shape_invalid"]
