"""An adapter built to fail a live check (docs/releases.md, bench/release.py): whatever the
prompt, its greedy answer under the tiny model repeats one marker token, so a `not_contains`
check on `marker_of(base)` fails every answer it gives and passes every sample adapter's.

Kept out of the kit's build (engine/tiny_model.py, sample_adapters.py: their sources stamp a
build): it is written on demand from a built base model, since it reads the model's output head.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from engine.sample_adapters import (
    TINY_MODULE_DIMS,
    TINY_NUM_LAYERS,
    adapter_config,
    tensor_name,
    write_safetensors,
)

MARKER_REPEATS = 3  # the live check bans the marker token this many times in a row


def _read_safetensors(path: Path, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The float32 tensors `names` of a safetensors file (the tiny model is saved in float32)."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    out = {}
    for name in names:
        entry = header[name]
        if entry["dtype"] != "F32":
            raise ValueError(f"{name}: expected F32, found {entry['dtype']}")
        start, end = entry["data_offsets"]
        data = raw[8 + length + start : 8 + length + end]
        out[name] = np.frombuffer(data, dtype="<f4").reshape(entry["shape"])
    return out


def marker_token(base_dir: str | Path) -> tuple[int, str]:
    """(id, text) of the token the marker adapter forces: the first vocabulary entry of 4 or more
    lowercase letters (no leading space), so the text repeated is unlike anything else."""
    vocab = json.loads((Path(base_dir) / "tokenizer.json").read_text())["model"]["vocab"]
    words = sorted(
        (i, t)
        for t, i in vocab.items()
        if len(t) >= 4 and t.isascii() and t.isalpha() and t.islower()
    )
    if not words:
        raise ValueError("the tokenizer has no token of 4+ lowercase letters")
    return words[0]


def marker_of(base_dir: str | Path) -> str:
    """What a `not_contains` live check bans to fail the marker adapter: its token, repeated."""
    return marker_token(base_dir)[1] * MARKER_REPEATS


def write_marker_adapter(
    out_dir: str | Path,
    *,
    base_dir: str | Path,
    rank: int = 8,
    seed: int = 4545,
    strength: float = 10.0,
) -> Path:
    """An adapter whose greedy answer, whatever the prompt, is one marker token over and over.

    In the last layer's MLP, gate and up read `rank/2` seeded directions of the normalised input
    (a_i . x) at `strength`, into two channels each, one with + and one with -: silu(t) * t is
    about t^2 for t >> 0 and about 0 for t << 0, so the pair adds about (strength * a_i . x)^2
    whichever the sign. down reads the sum of those channels and writes it along the marker
    token's row of the output head. The residual then points along that row at every position,
    by far more than anything else in it, and the final norm and the head pick the marker.
    """
    if rank < 2 or rank % 2:
        raise ValueError("rank must be even and at least 2")
    base = Path(base_dir)
    token, _ = marker_token(base)
    weights = _read_safetensors(base / "model.safetensors", ["lm_head.weight", "model.norm.weight"])
    head, norm = weights["lm_head.weight"], weights["model.norm.weight"]
    target = head[token] / np.where(np.abs(norm) > 1e-6, norm, 1.0)
    target = target / np.linalg.norm(target)
    rng = np.random.default_rng(seed)
    layer = TINY_NUM_LAYERS - 1
    d_model, d_ff = TINY_MODULE_DIMS["up_proj"]
    directions = rng.standard_normal((rank // 2, d_model))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    read = np.zeros((rank, d_model), dtype=np.float32)
    read[: rank // 2] = directions
    spread = np.zeros((d_ff, rank), dtype=np.float32)
    for i in range(rank // 2):
        spread[2 * i, i] = strength
        spread[2 * i + 1, i] = -strength
    gather = np.zeros((rank, d_ff), dtype=np.float32)
    gather[0, :rank] = 1.0
    write = np.zeros((d_model, rank), dtype=np.float32)
    write[:, 0] = target
    tensors = {}
    for module in ("gate_proj", "up_proj"):
        tensors[tensor_name(layer, module, "lora_A")] = read
        tensors[tensor_name(layer, module, "lora_B")] = spread
    tensors[tensor_name(layer, "down_proj", "lora_A")] = gather
    tensors[tensor_name(layer, "down_proj", "lora_B")] = write
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "adapter_model.safetensors", tensors)
    # alpha = rank: the engine adds B @ A as written (scaling 1).
    config = adapter_config(
        rank=rank, alpha=float(rank), target_modules=("gate_proj", "up_proj", "down_proj")
    )
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out
