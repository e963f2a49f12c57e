"""Malformed adapter_config.json and tensors that do not fit the base model or the config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.validation.builders import (
    CONFIG,
    TINY_MODULE_DIMS,
    Case,
    patch_config,
    rewrite_tensors,
    run_case,
    tensor_key,
)


def _config(**changes):
    def build(adapter: Path) -> None:
        patch_config(adapter, **changes)

    return build


def _config_bytes(raw: bytes):
    def build(adapter: Path) -> None:
        (adapter / CONFIG).write_bytes(raw)

    return build


def _without(key: str):
    def build(adapter: Path) -> None:
        import json

        config = json.loads((adapter / CONFIG).read_text())
        del config[key]
        (adapter / CONFIG).write_text(json.dumps(config))

    return build


def _max_rank(rank: int):
    return lambda adapter: {"max_rank": rank}


def _tensors(mutate, **kwargs):
    def build(adapter: Path) -> None:
        rewrite_tensors(adapter, mutate, **kwargs)

    return build


def _rename(old: str, new: str):
    def mutate(tensors: dict[str, np.ndarray]) -> None:
        tensors[new] = tensors.pop(old)

    return mutate


def _rename_pair(layer: int, module: str, new_stem: str):
    def mutate(tensors: dict[str, np.ndarray]) -> None:
        for matrix in ("A", "B"):
            tensors[f"{new_stem}.lora_{matrix}.weight"] = tensors.pop(
                tensor_key(layer, module, matrix)
            )

    return mutate


def _drop(name: str):
    return lambda tensors: tensors.pop(name)


def _reshape(name: str, shape: tuple[int, ...]):
    def mutate(tensors: dict[str, np.ndarray]) -> None:
        tensors[name] = np.zeros(shape, dtype=np.float32)

    return mutate


Q_A, Q_B = tensor_key(0, "q_proj", "A"), tensor_key(0, "q_proj", "B")
V_B = tensor_key(1, "v_proj", "B")
LAYER0 = "base_model.model.model.layers.0"
WIDE_Q = {**TINY_MODULE_DIMS, "q_proj": (64, 128)}

CASES = [
    # config file as JSON
    Case("config not JSON", _config_bytes(b"peft_type: LORA\n"), "config.invalid_json"),
    Case("config empty", _config_bytes(b""), "config.invalid_json"),
    Case(
        "config latin-1",
        _config_bytes('{"peft_type": "LORA", "x": "é"}'.encode("latin-1")),
        "config.not_utf8",
    ),
    Case("config duplicate key", _config_bytes(b'{"r": 4, "r": 64}'), "config.duplicate_key"),
    Case("config NaN alpha literal", _config_bytes(b'{"lora_alpha": NaN}'), "config.nan_literal"),
    Case("config is a list", _config_bytes(b"[]"), "config.not_object"),
    # PEFT semantics
    Case(
        "peft_type PREFIX_TUNING", _config(peft_type="PREFIX_TUNING"), "config.peft_type_not_lora"
    ),
    Case("peft_type lowercase", _config(peft_type="lora"), "config.peft_type_not_lora"),
    Case("peft_type missing", _without("peft_type"), "config.field_missing"),
    Case("DoRA", _config(use_dora=True), "config.dora_not_supported"),
    Case("use_dora as a string", _config(use_dora="false"), "config.field_type"),
    Case("bias all", _config(bias="all"), "config.bias_not_supported"),
    Case("bias lora_only", _config(bias="lora_only"), "config.bias_not_supported"),
    Case(
        "modules_to_save",
        _config(modules_to_save=["lm_head"]),
        "config.modules_to_save_not_supported",
    ),
    Case("r above max rank", _max_rank(2), "config.rank_too_high"),
    Case("r zero", _config(r=0), "config.rank_invalid"),
    Case("r as a string", _config(r="4"), "config.rank_invalid"),
    Case("r as a boolean", _config(r=True), "config.rank_invalid"),
    Case("r missing", _without("r"), "config.field_missing"),
    Case("r inconsistent with tensors", _config(r=8), "tensors.rank_mismatch"),
    Case("alpha zero", _config(lora_alpha=0), "config.alpha_invalid"),
    Case("alpha negative", _config(lora_alpha=-16), "config.alpha_invalid"),
    # A number no float or database column holds is refused where it is parsed, whatever its key.
    Case(
        "alpha overflowing to inf",
        _config_bytes(b'{"peft_type":"LORA","r":4,"lora_alpha":1e999}'),
        "config.invalid_json",
    ),
    Case(
        "alpha too large for a float", _config(lora_alpha=10**20 * 10**300), "config.invalid_json"
    ),
    Case("rank of 31 digits", _config(r=10**30), "config.invalid_json"),
    Case("rank of 19 digits", _config(r=10**18), "config.rank_too_high"),
    Case("rank_pattern", _config(rank_pattern={"q_proj": 8}), "config.rank_pattern_not_supported"),
    Case("lora_bias", _config(lora_bias=True), "config.feature_not_supported"),
    Case("init PiSSA", _config(init_lora_weights="pissa"), "config.feature_not_supported"),
    Case("layer_replication", _config(layer_replication=[[0, 1]]), "config.feature_not_supported"),
    Case(
        "target module unknown",
        _config(target_modules=["q_proj", "v_proj", "foo_proj"]),
        "config.target_module_unknown",
    ),
    Case(
        "target module lm_head",
        _config(target_modules=["q_proj", "v_proj", "lm_head"]),
        "config.target_module_unknown",
    ),
    Case(
        "target modules all-linear",
        _config(target_modules="all-linear"),
        "config.target_modules_invalid",
    ),
    Case("target modules empty", _config(target_modules=[]), "config.target_modules_invalid"),
    Case(
        "base model mismatch",
        _config(base_model_name_or_path="meta-llama/Llama-3-8B"),
        "config.base_model_mismatch",
    ),
    Case(
        "base model is a path",
        _config(base_model_name_or_path="/etc/passwd"),
        "config.base_model_mismatch",
    ),
    Case("base model missing", _without("base_model_name_or_path"), "config.base_model_mismatch"),
    Case("base model null", _config(base_model_name_or_path=None), "config.base_model_mismatch"),
    # tensors against the base model and the config
    Case(
        "full weight, not LoRA",
        _tensors(_rename(Q_A, f"{LAYER0}.self_attn.q_proj.weight")),
        "tensors.name_invalid",
    ),
    Case(
        "lm_head LoRA",
        _tensors(_rename(Q_A, "base_model.model.lm_head.lora_A.weight")),
        "tensors.name_invalid",
    ),
    Case(
        "embedding LoRA",
        _tensors(_rename(Q_A, f"{LAYER0}.embed_tokens.lora_embedding_A")),
        "tensors.name_invalid",
    ),
    Case(
        "layer with leading zero",
        _tensors(_rename_pair(0, "q_proj", "base_model.model.model.layers.00.self_attn.q_proj")),
        "tensors.name_invalid",
    ),
    Case(
        "layer out of range",
        _tensors(_rename_pair(0, "q_proj", "base_model.model.model.layers.7.self_attn.q_proj")),
        "tensors.layer_out_of_range",
    ),
    Case(
        "module unknown",
        _tensors(_rename_pair(0, "q_proj", f"{LAYER0}.self_attn.qkv_proj")),
        "tensors.module_unknown",
    ),
    Case(
        "module under the wrong parent",
        _tensors(_rename_pair(0, "q_proj", f"{LAYER0}.mlp.q_proj")),
        "tensors.module_unknown",
    ),
    Case("A without B", _tensors(_drop(Q_B)), "tensors.pair_incomplete"),
    Case("B without A", _tensors(_drop(Q_A)), "tensors.pair_incomplete"),
    Case("A in-dim wrong", _tensors(lambda t: None, module_dims=WIDE_Q), "tensors.shape_mismatch"),
    Case("B out-dim wrong", _tensors(_reshape(V_B, (128, 4))), "tensors.shape_mismatch"),
    Case("A transposed", _tensors(_reshape(Q_A, (128, 4))), "tensors.shape_mismatch"),
    Case("B rank differs from r", _tensors(_reshape(Q_B, (128, 2))), "tensors.rank_mismatch"),
    Case(
        "tensor module not targeted",
        _config(target_modules=["q_proj"]),
        "tensors.module_not_targeted",
    ),
    Case(
        "targeted module has no tensors",
        _config(target_modules=["q_proj", "v_proj", "k_proj"]),
        "tensors.target_module_missing",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_config_or_tensors_are_rejected_with_their_code(
    case: Case, tmp_path: Path
) -> None:
    report = run_case(case, tmp_path)
    assert not report.valid
    assert case.code in report.error_codes, report.error_codes
