"""Deterministic PEFT LoRA adapters for the tiny model, written without torch or peft.

Only numpy and safetensors' file format are used, so the portal's own environment (tests,
validation fixtures) can write adapters as well as the engine's kit can.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

TINY_BASE_MODEL_NAME = "tiny-llama"

# (in_features, out_features) of every LoRA-targetable linear layer of the tiny model
# (hidden 128, 2 heads of 64, 1 KV head, intermediate 256). A is [r, in], B is [out, r].
TINY_MODULE_DIMS: dict[str, tuple[int, int]] = {
    "q_proj": (128, 128),
    "k_proj": (128, 64),
    "v_proj": (128, 64),
    "o_proj": (128, 128),
    "gate_proj": (128, 256),
    "up_proj": (128, 256),
    "down_proj": (256, 128),
}
TINY_NUM_LAYERS = 2

# Which sub-module of a Llama decoder layer holds each projection (part of the tensor names).
_PARENT = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}

# The adapters the kit ships: name -> (rank, target modules, seed). Ranks 8/16/32 with different
# module sets so residency and rank budgets can be exercised with real, differing adapters.
SAMPLE_ADAPTERS: dict[str, tuple[int, tuple[str, ...], int]] = {
    "sample-r8": (8, ("q_proj", "v_proj"), 8),
    "sample-r16": (16, ("q_proj", "k_proj", "v_proj", "o_proj"), 16),
    "sample-r32": (32, ("gate_proj", "up_proj", "down_proj"), 32),
    "sample-r8-all": (8, tuple(TINY_MODULE_DIMS), 88),
}

_SAFETENSORS_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def tensor_name(layer: int, module: str, matrix: str) -> str:
    """PEFT's key for one LoRA matrix (`matrix` is "lora_A" or "lora_B") of a Llama layer."""
    return f"base_model.model.model.layers.{layer}.{_PARENT[module]}.{module}.{matrix}.weight"


def _to_bytes(array: np.ndarray, dtype: str) -> bytes:
    """Little-endian raw bytes of `array` in `dtype`; bfloat16 by round-to-nearest-even of f32."""
    if dtype == "float32":
        return array.astype("<f4").tobytes()
    if dtype == "float16":
        return array.astype("<f2").tobytes()
    if dtype == "bfloat16":
        bits = array.astype("<f4").view("<u4").astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return rounded.astype("<u2").tobytes()
    raise ValueError(f"unsupported dtype {dtype!r}; use one of {sorted(_SAFETENSORS_DTYPES)}")


def write_safetensors(
    path: Path, tensors: Mapping[str, np.ndarray], *, dtype: str = "float32"
) -> None:
    """Write `tensors` in the safetensors format (sorted names, 8-byte aligned header).

    Written by hand rather than with safetensors.numpy so bfloat16 needs no ml_dtypes, and so the
    bytes are a pure function of the input (byte-identical reruns).
    """
    code = _SAFETENSORS_DTYPES.get(dtype)
    if code is None:
        raise ValueError(f"unsupported dtype {dtype!r}; use one of {sorted(_SAFETENSORS_DTYPES)}")
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        blob = _to_bytes(np.asarray(tensors[name]), dtype)
        header[name] = {
            "dtype": code,
            "shape": list(np.shape(tensors[name])),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for blob in blobs:
            fh.write(blob)


def lora_tensors(
    *,
    rank: int,
    alpha: float,
    target_modules: Iterable[str],
    module_dims: Mapping[str, tuple[int, int]] = TINY_MODULE_DIMS,
    seed: int,
    layers: int = TINY_NUM_LAYERS,
    delta_std: float = 0.1,
) -> dict[str, np.ndarray]:
    """Seeded A/B matrices for every (layer, module); B is non-zero on purpose.

    PEFT initialises B to zero (an adapter that changes nothing). Here B is scaled so that the
    effective update (alpha/r) * B @ A has elements of about `delta_std`, several times the tiny
    model's own weights (std 0.02), so greedy output through the adapter visibly differs.
    """
    modules = list(dict.fromkeys(target_modules))
    unknown = [m for m in modules if m not in module_dims or m not in _PARENT]
    if unknown:
        raise ValueError(f"unknown target modules {unknown}; known: {sorted(module_dims)}")
    rng = np.random.default_rng(seed)
    scaling = alpha / rank
    tensors: dict[str, np.ndarray] = {}
    for layer in range(layers):
        for module in modules:
            d_in, d_out = module_dims[module]
            a_std = 1.0 / np.sqrt(d_in)
            b_std = delta_std / (scaling * np.sqrt(rank) * a_std)
            tensors[tensor_name(layer, module, "lora_A")] = (
                rng.standard_normal((rank, d_in)) * a_std
            ).astype(np.float32)
            tensors[tensor_name(layer, module, "lora_B")] = (
                rng.standard_normal((d_out, rank)) * b_std
            ).astype(np.float32)
    return tensors


def adapter_config(
    *,
    rank: int,
    alpha: float,
    target_modules: Iterable[str],
    base_model_name: str = TINY_BASE_MODEL_NAME,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A PEFT `adapter_config.json` body; `extra` overrides keys (e.g. use_dora for bad cases)."""
    config: dict[str, Any] = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "target_modules": list(dict.fromkeys(target_modules)),
        "bias": "none",
        "use_dora": False,
        "use_rslora": False,
        "modules_to_save": None,
        "fan_in_fan_out": False,
        "inference_mode": True,
        "base_model_name_or_path": base_model_name,
    }
    config.update(extra or {})
    return config


def write_lora_adapter(
    out_dir: str | Path,
    *,
    rank: int,
    target_modules: Iterable[str],
    seed: int,
    alpha: float | None = None,
    base_model_name: str = TINY_BASE_MODEL_NAME,
    module_dims: Mapping[str, tuple[int, int]] = TINY_MODULE_DIMS,
    layers: int = TINY_NUM_LAYERS,
    dtype: str = "float32",
    delta_std: float = 0.1,
    extra_config: Mapping[str, Any] | None = None,
) -> Path:
    """Write `adapter_config.json` and `adapter_model.safetensors` into `out_dir`; return it.

    `alpha` defaults to 2 * rank. Same arguments => byte-identical files.
    """
    if rank < 1:
        raise ValueError("rank must be >= 1")
    modules = list(dict.fromkeys(target_modules))
    alpha = float(2 * rank if alpha is None else alpha)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = lora_tensors(
        rank=rank,
        alpha=alpha,
        target_modules=modules,
        module_dims=module_dims,
        seed=seed,
        layers=layers,
        delta_std=delta_std,
    )
    write_safetensors(out / "adapter_model.safetensors", tensors, dtype=dtype)
    config = adapter_config(
        rank=rank,
        alpha=alpha,
        target_modules=modules,
        base_model_name=base_model_name,
        extra=extra_config,
    )
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out


def write_sample_adapters(adapters_root: str | Path) -> dict[str, Path]:
    """Write every adapter of SAMPLE_ADAPTERS under `adapters_root/<name>/`."""
    root = Path(adapters_root)
    written: dict[str, Path] = {}
    for name, (rank, modules, seed) in SAMPLE_ADAPTERS.items():
        written[name] = write_lora_adapter(
            root / name, rank=rank, target_modules=modules, seed=seed
        )
    return written
