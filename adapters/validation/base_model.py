"""What validation needs to know about a base model: its LoRA-targetable modules and layers.

Dimensions come from the model's HF `config.json`, so shapes are checked without loading weights.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.validation.codes import issue

# Decoder-layer sub-module holding each projection, for the Llama family (Llama, Mistral, Qwen2,
# Qwen3 share it); it is part of PEFT's tensor names.
LLAMA_MODULE_PARENTS: dict[str, str] = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}
SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
)


class BaseModelSpecError(ValueError):
    """The base model description is unusable (a usage error, not an adapter failure)."""

    def __init__(self, code: str, **params: Any) -> None:
        found = issue(code, **params)
        super().__init__(found.message)
        self.code = code
        self.issue = found


@dataclass(frozen=True)
class BaseModelSpec:
    """name: the registered name; aliases: other values base_model_name_or_path may carry
    (the HF id, the directory it was read from). module_dims: {short module name: (in, out)}."""

    name: str
    architecture: str
    module_dims: Mapping[str, tuple[int, int]]
    num_layers: int
    aliases: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.num_layers < 1:
            raise BaseModelSpecError("base_model.config_invalid", reason="num_layers must be >= 1")
        dims: dict[str, tuple[int, int]] = {}
        for module, pair in self.module_dims.items():
            short = module.rsplit(".", 1)[-1]  # accept "self_attn.q_proj" as well as "q_proj"
            if short not in LLAMA_MODULE_PARENTS:
                raise BaseModelSpecError(
                    "base_model.config_invalid", reason=f"unknown module {module!r}"
                )
            try:
                d_in, d_out = (int(v) for v in pair)
            except (TypeError, ValueError):
                d_in = d_out = 0  # reported just below
            if d_in < 1 or d_out < 1:
                raise BaseModelSpecError(
                    "base_model.config_invalid", reason=f"module {module!r} has dims {pair!r}"
                )
            dims[short] = (d_in, d_out)
        if not dims:
            raise BaseModelSpecError("base_model.config_invalid", reason="no module dims")
        object.__setattr__(self, "module_dims", dims)

    @property
    def accepted_names(self) -> tuple[str, ...]:
        return (self.name, *(a for a in self.aliases if a and a != self.name))

    def module_path(self, module: str) -> str:
        """'q_proj' -> 'self_attn.q_proj', the part of a tensor name inside a decoder layer."""
        return f"{LLAMA_MODULE_PARENTS[module]}.{module}"

    @classmethod
    def from_hf_config(
        cls, config: Mapping[str, Any], name: str, *, aliases: Iterable[str] = ()
    ) -> BaseModelSpec:
        """Read dims from a HF config.json of a Llama-family model (head_dim when present)."""
        if not isinstance(config, Mapping):
            raise BaseModelSpecError("base_model.config_invalid", reason="not a JSON object")
        archs = config.get("architectures")
        architecture = archs[0] if isinstance(archs, list) and len(archs) == 1 else archs
        if architecture not in SUPPORTED_ARCHITECTURES:
            raise BaseModelSpecError(
                "base_model.unsupported_architecture",
                architecture=architecture,
                supported=", ".join(SUPPORTED_ARCHITECTURES),
            )
        hidden = _positive_int(config, "hidden_size")
        intermediate = _positive_int(config, "intermediate_size")
        heads = _positive_int(config, "num_attention_heads")
        layers = _positive_int(config, "num_hidden_layers")
        kv_heads = _positive_int(config, "num_key_value_heads", default=heads)
        if config.get("head_dim") is not None:
            head_dim = _positive_int(config, "head_dim")
        elif hidden % heads:
            raise BaseModelSpecError(
                "base_model.config_invalid",
                reason=f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}",
            )
        else:
            head_dim = hidden // heads
        q_out, kv_out = heads * head_dim, kv_heads * head_dim
        dims = {
            "q_proj": (hidden, q_out),
            "k_proj": (hidden, kv_out),
            "v_proj": (hidden, kv_out),
            "o_proj": (q_out, hidden),
            "gate_proj": (hidden, intermediate),
            "up_proj": (hidden, intermediate),
            "down_proj": (intermediate, hidden),
        }
        return cls(
            name=name,
            architecture=str(architecture),
            module_dims=dims,
            num_layers=layers,
            aliases=tuple(aliases),
        )


def _positive_int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BaseModelSpecError(
            "base_model.config_invalid", reason=f"{key} must be a positive integer, got {value!r}"
        )
    return value
