"""`manage.py validate_adapter`: exit codes 0/1/2, JSON fields, both ways to name a base model."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.validation.builders import CONFIG, TINY_HF_CONFIG, WEIGHTS, good_adapter

ROOT = Path(__file__).resolve().parents[2]
JSON_FIELDS = {
    "valid",
    "errors",
    "rank",
    "alpha",
    "target_modules",
    "size_bytes",
    "files",
    "manifest_sha256",
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    return subprocess.run(
        [sys.executable, "manage.py", "validate_adapter", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "tiny-llama"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(TINY_HF_CONFIG))
    return path


def _sha256sum(path: Path) -> str:
    return subprocess.run(
        ["sha256sum", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()[0]


def test_valid_adapter_exits_0_with_the_json_fields(tmp_path: Path, model_dir: Path) -> None:
    adapter = good_adapter(tmp_path / "a", rank=8)
    result = _run(str(adapter), "--base-model-dir", str(model_dir), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) >= JSON_FIELDS
    assert report["valid"] is True and report["errors"] == []
    assert (report["rank"], report["alpha"], report["target_modules"]) == (
        8,
        16.0,
        ["q_proj", "v_proj"],
    )
    assert {f["name"]: f["sha256"] for f in report["files"]} == {
        CONFIG: _sha256sum(adapter / CONFIG),
        WEIGHTS: _sha256sum(adapter / WEIGHTS),
    }
    assert report["size_bytes"] == sum(f["size"] for f in report["files"])
    assert len(report["manifest_sha256"]) == 64


def test_invalid_adapter_exits_1_with_codes(tmp_path: Path, model_dir: Path) -> None:
    adapter = good_adapter(tmp_path / "a", extra_config={"use_dora": True})
    result = _run(str(adapter), "--base-model-dir", str(model_dir), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["valid"] is False
    assert [e["code"] for e in report["errors"]] == ["config.dora_not_supported"]
    assert report["errors"][0]["message"]


def test_text_output_lists_errors(tmp_path: Path, model_dir: Path) -> None:
    adapter = good_adapter(tmp_path / "a", rank=16)
    result = _run(str(adapter), "--base-model-dir", str(model_dir), "--max-rank", "8")
    assert result.returncode == 1
    assert "INVALID" in result.stdout and "config.rank_too_high" in result.stdout


def test_base_model_name_or_path_may_be_the_model_directory(
    tmp_path: Path, model_dir: Path
) -> None:
    adapter = good_adapter(tmp_path / "a", base_model_name=str(model_dir))
    assert _run(str(adapter), "--base-model-dir", str(model_dir)).returncode == 0
    other = good_adapter(tmp_path / "b", base_model_name="tiny-llama-2")
    assert _run(str(other), "--base-model-dir", str(model_dir)).returncode == 1


@pytest.mark.parametrize(
    "args",
    [
        ["{adapter}"],  # neither --base-model nor --base-model-dir
        ["{adapter}", "--base-model-dir", "{model}", "--base-model", "x"],
        ["{tmp}/nowhere", "--base-model-dir", "{model}"],
        ["{adapter}", "--base-model-dir", "{tmp}"],  # no config.json there
        ["{adapter}", "--base-model-dir", "{moe}"],  # unsupported architecture
        ["{adapter}", "--base-model-dir", "{model}", "--max-rank", "0"],
        ["{adapter}", "--base-model-dir", "{model}", "--max-rank", "eight"],
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, model_dir: Path, args: list[str]) -> None:
    adapter = good_adapter(tmp_path / "a")
    moe = tmp_path / "moe"
    moe.mkdir()
    (moe / "config.json").write_text(
        json.dumps({**TINY_HF_CONFIG, "architectures": ["Qwen3MoeForCausalLM"]})
    )
    values = {"adapter": adapter, "model": model_dir, "tmp": tmp_path, "moe": moe}
    result = _run(*(a.format(**values) for a in args))
    assert result.returncode == 2, (result.stdout, result.stderr)


def test_sign_the_manifest_with_openssl_then_verify(tmp_path: Path, model_dir: Path) -> None:
    """The tenant's flow: write the canonical manifest, sign it with openssl, upload both."""
    adapter = good_adapter(tmp_path / "a")
    key, pub = tmp_path / "key.pem", tmp_path / "pub.pem"
    subprocess.run(
        ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)],
        check=True,
    )
    subprocess.run(
        ["openssl", "ec", "-in", str(key), "-pubout", "-out", str(pub)],
        check=True,
        capture_output=True,
    )
    manifest = tmp_path / "manifest.json"
    assert (
        _run(
            str(adapter), "--base-model-dir", str(model_dir), "--manifest-out", str(manifest)
        ).returncode
        == 0
    )
    sig = tmp_path / "adapter.sig"
    subprocess.run(
        ["openssl", "dgst", "-sha256", "-sign", str(key), "-out", str(sig), str(manifest)],
        check=True,
    )
    signed = ["--base-model-dir", str(model_dir), "--trusted-key", str(pub), "--require-signature"]
    assert _run(str(adapter), *signed, "--signature", str(sig)).returncode == 0
    missing = _run(str(adapter), *signed, "--json")
    assert missing.returncode == 1
    assert [e["code"] for e in json.loads(missing.stdout)["errors"]] == ["signature.missing"]


@pytest.mark.django_db
def test_base_model_from_the_database(tmp_path: Path) -> None:
    from adapters.models import BaseModel
    from adapters.validation import BaseModelSpec

    spec = BaseModelSpec.from_hf_config(TINY_HF_CONFIG, "tiny-llama")
    BaseModel.objects.create(
        name="tiny-llama",
        source="org/tiny-llama",
        architecture=spec.architecture,
        hf_config=TINY_HF_CONFIG,
        module_dims={k: list(v) for k, v in spec.module_dims.items()},
        num_layers=spec.num_layers,
    )
    out = io.StringIO()
    call_command(
        "validate_adapter",
        str(good_adapter(tmp_path / "a")),
        base_model="tiny-llama",
        json=True,
        stdout=out,
    )
    assert json.loads(out.getvalue())["valid"] is True
    # the registered source (an HF id) is an accepted base_model_name_or_path too
    out = io.StringIO()
    hf_named = good_adapter(tmp_path / "b", base_model_name="org/tiny-llama")
    call_command("validate_adapter", str(hf_named), base_model="tiny-llama", stdout=out)
    with pytest.raises(CommandError) as invalid:
        call_command(
            "validate_adapter",
            str(good_adapter(tmp_path / "c", rank=8)),
            base_model="tiny-llama",
            max_rank=4,
            stdout=io.StringIO(),
        )
    assert invalid.value.returncode == 1
    with pytest.raises(CommandError) as unknown:
        call_command(
            "validate_adapter",
            str(tmp_path / "a"),
            base_model="no-such-model",
            stdout=io.StringIO(),
        )
    assert unknown.value.returncode == 2
