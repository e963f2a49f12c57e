"""Good adapters of several ranks, modules and dtypes pass; their hashes equal sha256sum's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from adapters.validation import canonical_manifest, manifest_sha256
from engine.sample_adapters import SAMPLE_ADAPTERS, TINY_MODULE_DIMS
from tests.validation.builders import CONFIG, SPEC, WEIGHTS, good_adapter, patch_config, validate


def _sha256sum(path: Path) -> str:
    out = subprocess.run(["sha256sum", str(path)], check=True, capture_output=True, text=True)
    return out.stdout.split()[0]


GOOD = [
    (1, ("q_proj",), "float32"),
    (8, ("q_proj", "v_proj"), "bfloat16"),
    (16, ("q_proj", "k_proj", "v_proj", "o_proj"), "float16"),
    (32, ("gate_proj", "up_proj", "down_proj"), "float32"),
    (64, tuple(TINY_MODULE_DIMS), "bfloat16"),
]


@pytest.mark.parametrize(
    ("rank", "modules", "dtype"), GOOD, ids=[f"r{r}-{len(m)}mod-{d}" for r, m, d in GOOD]
)
def test_good_adapters_pass_with_sha256sum_hashes(
    tmp_path: Path, rank: int, modules, dtype: str
) -> None:
    adapter = good_adapter(
        tmp_path / "a", rank=rank, target_modules=modules, dtype=dtype, seed=rank
    )
    report = validate(adapter)
    assert report.valid, report.errors
    assert (report.rank, report.alpha, report.target_modules) == (rank, 2.0 * rank, list(modules))
    assert report.dtype == {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[dtype]
    assert {f.name: f.sha256 for f in report.files} == {
        CONFIG: _sha256sum(adapter / CONFIG),
        WEIGHTS: _sha256sum(adapter / WEIGHTS),
    }
    assert (
        report.size_bytes == (adapter / CONFIG).stat().st_size + (adapter / WEIGHTS).stat().st_size
    )
    assert all(c.outcome == "passed" for c in report.checks if c.name != "signature.verify")
    json.dumps(report.to_dict())


@pytest.mark.parametrize("name", sorted(SAMPLE_ADAPTERS))
def test_the_engine_kit_sample_adapters_pass(tmp_path: Path, name: str) -> None:
    rank, modules, seed = SAMPLE_ADAPTERS[name]
    adapter = good_adapter(tmp_path / name, rank=rank, target_modules=modules, seed=seed)
    assert validate(adapter, max_rank=rank).valid


def test_rslora_is_accepted_and_reported(tmp_path: Path) -> None:
    adapter = good_adapter(tmp_path / "a")
    patch_config(adapter, use_rslora=True)
    report = validate(adapter)
    assert report.valid and report.use_rslora


def test_target_modules_may_name_the_parent(tmp_path: Path) -> None:
    adapter = good_adapter(tmp_path / "a")
    patch_config(adapter, target_modules=["self_attn.q_proj", "v_proj"])
    report = validate(adapter)
    assert report.valid and report.target_modules == ["q_proj", "v_proj"]


def test_base_model_alias_matches(tmp_path: Path) -> None:
    from dataclasses import replace

    adapter = good_adapter(tmp_path / "a", base_model_name="org/Tiny-Llama")
    assert not validate(adapter).valid
    assert validate(adapter, base_model=replace(SPEC, aliases=("org/Tiny-Llama",))).valid


def test_manifest_is_canonical_and_its_digest_is_reported(tmp_path: Path) -> None:
    report = validate(good_adapter(tmp_path / "a"))
    manifest = json.loads(canonical_manifest(report.files))
    assert manifest["format"] == "lora-portal/manifest/v1"
    assert [f["name"] for f in manifest["files"]] == [CONFIG, WEIGHTS]
    assert report.manifest_sha256 == manifest_sha256(reversed(report.files))


def test_same_files_same_manifest_digest_and_any_byte_changes_it(tmp_path: Path) -> None:
    one = validate(good_adapter(tmp_path / "one"))
    two = validate(good_adapter(tmp_path / "two"))
    assert one.manifest_sha256 == two.manifest_sha256
    patch_config(tmp_path / "two", lora_dropout=0.05)
    assert validate(tmp_path / "two").manifest_sha256 != one.manifest_sha256
