"""Hypothesis strategies for hostile adapter JSON: integers of any length, deep nesting, many
entries, wrong types. Values are serialised by `dump`, which also writes raw fragments (Raw) that
no Python value produces: 6,000-digit integers, 1e400, 3,000 levels of brackets."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from adapters.validation.safetensors_header import DTYPE_SIZES
from tests.validation.builders import tensor_key


@dataclass(frozen=True)
class Raw:
    text: str


def dump(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)  # NaN and Infinity come out as their (refused) literals


def _nest(depth: int, kind: str) -> Raw:
    if kind == "list":
        return Raw("[" * depth + "0" + "]" * depth)
    return Raw('{"a":' * depth + "0" + "}" * depth)


huge_ints = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=19, max_value=400).map(lambda d: 10**d - 1),  # json.dumps can
    st.integers(min_value=21, max_value=6_000).map(lambda d: Raw("9" * d)),  # past int()'s cap
    st.integers(min_value=21, max_value=5_000).map(lambda d: Raw("-" + "1" * d)),
)
numbers = st.one_of(
    huge_ints,
    st.floats(),  # NaN, +-Infinity too
    st.sampled_from([Raw("1e400"), Raw("-1e400"), Raw("1e-400"), Raw("1" * 400 + ".5")]),
)
deep = st.builds(
    _nest, st.integers(min_value=1, max_value=3_000), st.sampled_from(["list", "dict"])
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=30), deep)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)

# --- safetensors headers ---
lora_names = st.builds(
    tensor_key,
    st.integers(min_value=0, max_value=3),
    st.sampled_from(["q_proj", "v_proj", "k_proj", "gate_proj"]),
    st.sampled_from(["A", "B"]),
)
names = lora_names | st.text(max_size=40)
dtypes = st.sampled_from([*DTYPE_SIZES, "F4", "f32", ""]) | values
shapes = st.lists(huge_ints, max_size=12) | values
offsets = st.lists(huge_ints, min_size=2, max_size=2) | values
entries = (
    st.fixed_dictionaries({"dtype": dtypes, "shape": shapes, "data_offsets": offsets}) | values
)


@st.composite
def headers(draw: st.DrawFn) -> str:
    """A header's JSON text: a few drawn entries, maybe one repeated thousands of times under
    fresh names, maybe a metadata value of any type, or any value at all."""
    if draw(st.integers(0, 9)) == 0:
        return dump(draw(values))
    document: dict[str, Any] = dict(draw(st.dictionaries(names, entries, max_size=6)))
    copies = draw(st.sampled_from([0, 0, 10, 5_000]))
    if copies:
        entry = draw(entries)
        document.update({f"t{i}": entry for i in range(copies)})
    if draw(st.booleans()):
        document["__metadata__"] = draw(st.dictionaries(st.text(max_size=8), scalars) | values)
    return dump(document)


def weights_with(header_text: str, data: bytes) -> bytes:
    raw = header_text.encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(raw)) + raw + data


# --- adapter_config.json ---
CONFIG_KEYS = (
    "peft_type",
    "r",
    "lora_alpha",
    "bias",
    "use_dora",
    "use_rslora",
    "modules_to_save",
    "target_modules",
    "base_model_name_or_path",
    "rank_pattern",
    "init_lora_weights",
    "lora_dropout",
)
rank_values = huge_ints | values
config_changes = st.fixed_dictionaries(
    {},
    optional={"r": rank_values, "lora_alpha": numbers | values}
    | {key: values for key in CONFIG_KEYS if key not in ("r", "lora_alpha")},
)


@st.composite
def configs(draw: st.DrawFn, good: dict[str, Any]) -> str:
    """A near-valid config with some fields replaced by hostile values, many extra keys, or any
    value at all."""
    if draw(st.integers(0, 9)) == 0:
        return dump(draw(values))
    config: dict[str, Any] = {**good, **draw(config_changes)}
    extra = draw(st.sampled_from([0, 0, 3, 1_000]))
    config.update({f"x{i}": i for i in range(extra)})
    return dump(config)
