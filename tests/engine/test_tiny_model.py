"""The tiny-model kit, run for real with the engine's interpreter (torch, transformers)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from engine.launcher import ENGINE_PYTHON, REPO_ROOT
from engine.sample_adapters import SAMPLE_ADAPTERS, TINY_MODULE_DIMS, TINY_NUM_LAYERS
from engine.tiny_model import STAMP_NAME, is_complete


def _kit(out: Path) -> dict[str, object]:
    done = subprocess.run(
        [str(ENGINE_PYTHON), "-m", "engine.tiny_model", "--out", str(out)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for sub in ("base", "adapters")
        for p in sorted((root / sub).rglob("*"))
        if p.is_file()
    }


def test_it_builds_a_llama_whose_module_dims_match_the_adapter_constants(
    tiny_model_dir: Path,
) -> None:
    config = json.loads((tiny_model_dir / "base" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    head_dim = config["head_dim"]
    assert head_dim == 64  # the CPU attention kernel refuses 16
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * head_dim
    assert {
        "q_proj": (hidden, config["num_attention_heads"] * head_dim),
        "k_proj": (hidden, kv),
        "v_proj": (hidden, kv),
        "o_proj": (config["num_attention_heads"] * head_dim, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    } == TINY_MODULE_DIMS
    assert config["num_hidden_layers"] == TINY_NUM_LAYERS
    assert (tiny_model_dir / "base" / "model.safetensors").is_file()
    for name in SAMPLE_ADAPTERS:
        assert (tiny_model_dir / "adapters" / name / "adapter_model.safetensors").is_file()


def test_it_saves_a_tokenizer_with_a_chat_template(tiny_model_dir: Path) -> None:
    base = tiny_model_dir / "base"
    assert (base / "tokenizer.json").is_file()
    template = (base / "chat_template.jinja").read_text()
    assert "add_generation_prompt" in template
    vocab = json.loads((base / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(vocab) == json.loads((base / "config.json").read_text())["vocab_size"]


def test_it_is_deterministic_and_a_second_run_is_a_no_op(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    first = _kit(tmp_path / "tiny")
    assert first["built"] is True
    assert is_complete(tmp_path / "tiny")
    assert _digests(tmp_path / "tiny") == _digests(tiny_model_dir)  # same seed, same bytes
    stamp_before = (tmp_path / "tiny" / STAMP_NAME).stat().st_mtime_ns
    second = _kit(tmp_path / "tiny")
    assert second["built"] is False
    assert (tmp_path / "tiny" / STAMP_NAME).stat().st_mtime_ns == stamp_before
