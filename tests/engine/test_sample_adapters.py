"""The sample-adapter writer (numpy only): PEFT layout, shapes from the module dims, determinism."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from engine.sample_adapters import (
    SAMPLE_ADAPTERS,
    TINY_BASE_MODEL_NAME,
    TINY_MODULE_DIMS,
    tensor_name,
    write_lora_adapter,
    write_sample_adapters,
)


def test_it_writes_peft_config_and_ab_pairs_with_module_shapes(tmp_path: Path) -> None:
    out = write_lora_adapter(
        tmp_path / "a", rank=16, target_modules=["q_proj", "k_proj", "down_proj"], seed=3
    )
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA"
    assert config["task_type"] == "CAUSAL_LM"
    assert config["r"] == 16
    assert config["lora_alpha"] == 32.0
    assert config["bias"] == "none"
    assert config["target_modules"] == ["q_proj", "k_proj", "down_proj"]
    assert config["base_model_name_or_path"] == TINY_BASE_MODEL_NAME

    tensors = load_file(out / "adapter_model.safetensors")
    assert len(tensors) == 2 * 3 * 2  # layers x modules x (A, B)
    for layer in range(2):
        for module in ("q_proj", "k_proj", "down_proj"):
            d_in, d_out = TINY_MODULE_DIMS[module]
            assert tensors[tensor_name(layer, module, "lora_A")].shape == (16, d_in)
            assert tensors[tensor_name(layer, module, "lora_B")].shape == (d_out, 16)
    assert "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight" in tensors


def test_it_makes_b_nonzero_so_the_adapter_changes_outputs(tmp_path: Path) -> None:
    out = write_lora_adapter(tmp_path / "a", rank=8, target_modules=["v_proj"], seed=1)
    tensors = load_file(out / "adapter_model.safetensors")
    b = tensors[tensor_name(0, "v_proj", "lora_B")]
    a = tensors[tensor_name(0, "v_proj", "lora_A")]
    delta = (16 / 8) * b @ a  # alpha / r * B A, what the engine adds to the weight
    assert np.all(np.isfinite(delta))
    # Several times the tiny model's own weight scale (std 0.02), by construction.
    assert 0.05 < float(delta.std()) < 0.2


def test_it_is_byte_identical_for_the_same_seed_and_different_otherwise(tmp_path: Path) -> None:
    write = functools.partial(write_lora_adapter, rank=8, target_modules=["q_proj", "v_proj"])
    one = write(tmp_path / "one", seed=5)
    two = write(tmp_path / "two", seed=5)
    other = write(tmp_path / "other", seed=6)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (one / name).read_bytes() == (two / name).read_bytes()
    assert (one / "adapter_model.safetensors").read_bytes() != (
        other / "adapter_model.safetensors"
    ).read_bytes()


def test_it_writes_bfloat16_that_the_safetensors_library_reads(tmp_path: Path) -> None:
    f32 = write_lora_adapter(tmp_path / "f32", rank=8, target_modules=["q_proj"], seed=2)
    bf16 = write_lora_adapter(
        tmp_path / "bf16", rank=8, target_modules=["q_proj"], seed=2, dtype="bfloat16"
    )
    name = tensor_name(0, "q_proj", "lora_A")
    with safe_open(str(bf16 / "adapter_model.safetensors"), framework="numpy") as fh:
        assert fh.get_slice(name).get_dtype() == "BF16"
        assert fh.get_slice(name).get_shape() == [8, 128]
    # bfloat16 keeps the top 16 bits of float32: decode by hand and compare within its precision.
    raw = (bf16 / "adapter_model.safetensors").read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_len])
    start, end = header[name]["data_offsets"]
    data = raw[8 + header_len + start : 8 + header_len + end]
    decoded = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(8, 128)
    expected = load_file(f32 / "adapter_model.safetensors")[name]
    np.testing.assert_allclose(decoded, expected, rtol=1 / 128)


def test_extra_config_overrides_keys_for_invalid_cases(tmp_path: Path) -> None:
    out = write_lora_adapter(
        tmp_path / "dora",
        rank=8,
        target_modules=["q_proj"],
        seed=1,
        extra_config={"use_dora": True},
    )
    assert json.loads((out / "adapter_config.json").read_text())["use_dora"] is True


def test_it_refuses_unknown_modules_and_dtypes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown target modules"):
        write_lora_adapter(tmp_path / "x", rank=8, target_modules=["lm_head"], seed=1)
    with pytest.raises(ValueError, match="unsupported dtype"):
        write_lora_adapter(tmp_path / "y", rank=8, target_modules=["q_proj"], seed=1, dtype="int8")


def test_sample_set_has_ranks_8_16_32_on_different_modules(tmp_path: Path) -> None:
    written = write_sample_adapters(tmp_path)
    assert set(written) == set(SAMPLE_ADAPTERS)
    ranks = {json.loads((p / "adapter_config.json").read_text())["r"] for p in written.values()}
    assert {8, 16, 32} <= ranks
    module_sets = {tuple(modules) for _, modules, _ in SAMPLE_ADAPTERS.values()}
    assert len(module_sets) == len(SAMPLE_ADAPTERS)
