"""Test helpers that build good adapters (engine.sample_adapters) and bend them into bad ones."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adapters.validation import (
    BaseModelSpec,
    TrustedKey,
    ValidationLimits,
    ValidationReport,
    validate_adapter_dir,
)
from engine.sample_adapters import (
    TINY_BASE_MODEL_NAME,
    TINY_MODULE_DIMS,
    TINY_NUM_LAYERS,
    lora_tensors,
    write_lora_adapter,
    write_safetensors,
)

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
SPEC = BaseModelSpec(
    name=TINY_BASE_MODEL_NAME,
    architecture="LlamaForCausalLM",
    module_dims=TINY_MODULE_DIMS,
    num_layers=TINY_NUM_LAYERS,
)
# The tiny model's config.json (engine/tiny_model.py): hidden 128, 2 heads of 64, 1 KV head.
TINY_HF_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "head_dim": 64,
    "vocab_size": 512,
}
GOOD_RANK = 4
GOOD_MODULES = ("q_proj", "v_proj")


def good_adapter(path: Path, **kwargs: Any) -> Path:
    options: dict[str, Any] = {"rank": GOOD_RANK, "target_modules": GOOD_MODULES, "seed": 7}
    options.update(kwargs)
    return write_lora_adapter(path, **options)


def validate(path: Path, **kwargs: Any) -> ValidationReport:
    kwargs.setdefault("base_model", SPEC)
    kwargs.setdefault("max_rank", 64)
    return validate_adapter_dir(path, **kwargs)


def read_safetensors(path: Path) -> tuple[dict[str, Any], bytes]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def write_raw_safetensors(
    path: Path, header: bytes, data: bytes, *, length: int | None = None
) -> None:
    prefix = struct.pack("<Q", len(header) if length is None else length)
    path.write_bytes(prefix + header + data)


def rewrite_header(adapter: Path, mutate: Callable[[dict[str, Any]], Any]) -> None:
    """Apply `mutate` to the parsed header of the adapter's weights and write it back."""
    weights = adapter / WEIGHTS
    header, data = read_safetensors(weights)
    mutate(header)
    write_raw_safetensors(weights, json.dumps(header).encode(), data)


def rewrite_header_text(adapter: Path, edit: Callable[[str], str]) -> None:
    weights = adapter / WEIGHTS
    header, data = read_safetensors(weights)
    write_raw_safetensors(weights, edit(json.dumps(header)).encode("utf-8", "surrogatepass"), data)


def patch_config(adapter: Path, **changes: Any) -> None:
    config = json.loads((adapter / CONFIG).read_text())
    config.update(changes)
    (adapter / CONFIG).write_text(json.dumps(config))


def tensor_key(layer: int, module: str, matrix: str) -> str:
    parent = "self_attn" if module in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
    return f"base_model.model.model.layers.{layer}.{parent}.{module}.lora_{matrix}.weight"


def rewrite_tensors(
    adapter: Path, mutate: Callable[[dict[str, np.ndarray]], Any], **kwargs: Any
) -> None:
    """Rebuild the weights from good tensors changed by `mutate` (names, shapes, values)."""
    options: dict[str, Any] = {
        "rank": GOOD_RANK,
        "alpha": 2.0 * GOOD_RANK,
        "target_modules": GOOD_MODULES,
        "seed": 7,
    }
    options.update(kwargs)
    tensors = lora_tensors(**options)
    mutate(tensors)
    write_safetensors(adapter / WEIGHTS, tensors)


def poke(adapter: Path, tensor: str, element: int, raw: bytes) -> None:
    """Overwrite the bytes of one element of one tensor in place."""
    weights = adapter / WEIGHTS
    header, _ = read_safetensors(weights)
    (length,) = struct.unpack("<Q", weights.read_bytes()[:8])
    begin = header[tensor]["data_offsets"][0]
    with open(weights, "r+b") as handle:
        handle.seek(8 + length + begin + element * len(raw))
        handle.write(raw)


@dataclass
class Case:
    """One malformed adapter: `build` bends a good one at the given folder; `code` must appear."""

    id: str
    build: Callable[[Path], dict[str, Any] | None]
    code: str
    good_kwargs: dict[str, Any] = field(default_factory=dict)


def run_case(case: Case, tmp_path: Path) -> ValidationReport:
    adapter = good_adapter(tmp_path / "adapter", **case.good_kwargs)
    extra = case.build(adapter) or {}
    report = validate(adapter, **extra)
    json.dumps(report.to_dict())  # always serialisable, whatever went wrong
    return report


__all__ = [
    "CONFIG",
    "GOOD_MODULES",
    "GOOD_RANK",
    "SPEC",
    "TINY_HF_CONFIG",
    "WEIGHTS",
    "Case",
    "TrustedKey",
    "ValidationLimits",
    "good_adapter",
    "patch_config",
    "poke",
    "read_safetensors",
    "rewrite_header",
    "rewrite_header_text",
    "rewrite_tensors",
    "run_case",
    "tensor_key",
    "validate",
    "write_raw_safetensors",
]
