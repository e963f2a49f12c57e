"""Base model specs from HF config.json: dims of Llama-family models, clear errors otherwise."""

from __future__ import annotations

import pytest

from adapters.validation import BaseModelSpec, BaseModelSpecError
from engine.sample_adapters import TINY_MODULE_DIMS
from tests.validation.builders import TINY_HF_CONFIG

QWEN3_32B = {  # head_dim is explicit and differs from hidden / heads
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 64,
}
LLAMA_3_8B = {  # no head_dim: hidden / heads
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
}


def test_tiny_model_dims_match_the_engine_kit() -> None:
    spec = BaseModelSpec.from_hf_config(TINY_HF_CONFIG, "tiny-llama")
    assert dict(spec.module_dims) == TINY_MODULE_DIMS
    assert spec.num_layers == 2 and spec.architecture == "LlamaForCausalLM"


def test_qwen3_uses_its_explicit_head_dim() -> None:
    dims = BaseModelSpec.from_hf_config(QWEN3_32B, "qwen3-32b").module_dims
    assert dims["q_proj"] == (5120, 8192)
    assert dims["k_proj"] == dims["v_proj"] == (5120, 1024)
    assert dims["o_proj"] == (8192, 5120)
    assert dims["down_proj"] == (25600, 5120)


def test_llama_derives_head_dim_and_grouped_kv() -> None:
    dims = BaseModelSpec.from_hf_config(LLAMA_3_8B, "llama-3-8b").module_dims
    assert dims["q_proj"] == (4096, 4096)
    assert dims["k_proj"] == (4096, 1024)
    assert dims["gate_proj"] == dims["up_proj"] == (4096, 14336)


def test_kv_heads_default_to_attention_heads() -> None:
    config = {**LLAMA_3_8B, "architectures": ["MistralForCausalLM"]}
    del config["num_key_value_heads"]
    assert BaseModelSpec.from_hf_config(config, "m").module_dims["v_proj"] == (4096, 4096)


@pytest.mark.parametrize(
    "architectures",
    [["Qwen3MoeForCausalLM"], ["GPT2LMHeadModel"], None, [], ["LlamaForCausalLM", "X"]],
)
def test_unsupported_architectures_are_named(architectures) -> None:
    with pytest.raises(BaseModelSpecError) as caught:
        BaseModelSpec.from_hf_config({**LLAMA_3_8B, "architectures": architectures}, "x")
    assert caught.value.code == "base_model.unsupported_architecture"
    assert "LlamaForCausalLM" in str(caught.value)  # says what is supported


@pytest.mark.parametrize(
    "change",
    [
        {"hidden_size": None},
        {"hidden_size": "4096"},
        {"num_attention_heads": 0},
        {"hidden_size": 4097},
        {"head_dim": -1},
        {"num_hidden_layers": True},
    ],
)
def test_unusable_configs_say_which_field(change) -> None:
    with pytest.raises(BaseModelSpecError) as caught:
        BaseModelSpec.from_hf_config({**LLAMA_3_8B, **change}, "x")
    assert caught.value.code == "base_model.config_invalid"


def test_spec_accepts_module_paths_and_rejects_unknown_modules() -> None:
    # A list, as JSON gives it: the spec keeps it as a tuple.
    spec = BaseModelSpec("m", "LlamaForCausalLM", {"self_attn.q_proj": [8, 8]}, 1)  # type: ignore[dict-item]
    assert dict(spec.module_dims) == {"q_proj": (8, 8)}
    with pytest.raises(BaseModelSpecError):
        BaseModelSpec("m", "LlamaForCausalLM", {"lm_head": (8, 8)}, 1)
    with pytest.raises(BaseModelSpecError):
        BaseModelSpec("m", "LlamaForCausalLM", {"q_proj": (8,)}, 1)  # type: ignore[dict-item]
