"""Checks of adapter_config.json against what vLLM serves faithfully and the base model.

use_rslora is accepted: vLLM 0.32 scales by alpha/sqrt(r) for it (vllm/lora/peft_helper.py), so
the served adapter matches the trained one. Features vLLM ignores or refuses are refused here,
so a bad adapter fails at upload, not as a 500 when an engine loads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from adapters.validation.base_model import BaseModelSpec
from adapters.validation.codes import Issue, as_json, issue
from adapters.validation.report import Recorder
from adapters.validation.strict_json import StrictJSONError, loads_strict

# PEFT inits that only set initial weights, so the saved adapter is a plain LoRA (as vLLM has it).
_PLAIN_INITS = {"gaussian", "eva", "orthogonal", "mica", "lora_ga"}


@dataclass(frozen=True)
class LoraConfig:
    """What later checks need; None where the config's value was unusable."""

    rank: int | None
    alpha: float | None
    target_modules: tuple[str, ...] | None
    use_rslora: bool = False
    raw: dict[str, Any] = field(default_factory=dict)


def parse_config(raw: bytes, recorder: Recorder) -> dict[str, Any] | None:
    try:
        document = loads_strict(raw)
    except StrictJSONError as exc:
        code = {
            "not_utf8": "config.not_utf8",
            "duplicate_key": "config.duplicate_key",
            "nan_literal": "config.nan_literal",
        }.get(exc.kind, "config.invalid_json")
        recorder.record(
            "config.parse", [issue(code, reason=exc.detail, key=exc.key, literal=exc.literal)]
        )
        return None
    if not isinstance(document, dict):
        recorder.record("config.parse", [issue("config.not_object", kind=type(document).__name__)])
        return None
    recorder.record("config.parse", [])
    return document


def check_config(
    config: dict[str, Any], *, spec: BaseModelSpec, max_rank: int, recorder: Recorder
) -> LoraConfig:
    peft_type = config.get("peft_type")
    recorder.record(
        "config.peft_type",
        []
        if peft_type == "LORA"
        else [
            issue("config.field_missing", field="peft_type")
            if peft_type is None
            else issue("config.peft_type_not_lora", value=as_json(peft_type))
        ],
    )
    rank = _check_rank(config, max_rank, recorder)
    alpha = _check_alpha(config, recorder)
    bias = config.get("bias", "none")
    recorder.record(
        "config.bias",
        [] if bias == "none" else [issue("config.bias_not_supported", value=as_json(bias))],
    )
    dora = config.get("use_dora", False)
    recorder.record("config.dora", _flag(dora, "use_dora", "config.dora_not_supported"))
    rslora = config.get("use_rslora", False)
    recorder.record("config.rslora", _flag(rslora, "use_rslora", None))
    to_save = config.get("modules_to_save")
    recorder.record(
        "config.modules_to_save",
        [issue("config.modules_to_save_not_supported", value=as_json(to_save))] if to_save else [],
    )
    recorder.record(
        "config.rank_pattern",
        [
            issue("config.rank_pattern_not_supported", field=key, value=as_json(config[key]))
            for key in ("rank_pattern", "alpha_pattern")
            if config.get(key)
        ],
    )
    recorder.record("config.unsupported_features", _unsupported_features(config))
    targets = _check_target_modules(config, spec, recorder)
    recorder.record("config.base_model", _check_base_model(config, spec))
    return LoraConfig(
        rank=rank,
        alpha=alpha,
        target_modules=targets,
        use_rslora=rslora is True,
        raw=config,
    )


def _flag(value: Any, name: str, refused_code: str | None) -> list[Issue]:
    if not isinstance(value, bool):
        return [
            issue("config.field_type", field=name, expected="true or false", value=as_json(value))
        ]
    return [issue(refused_code)] if value and refused_code else []


def _check_rank(config: dict[str, Any], max_rank: int, recorder: Recorder) -> int | None:
    if "r" not in config:
        recorder.record("config.rank", [issue("config.field_missing", field="r")])
        return None
    rank = config["r"]
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        recorder.record("config.rank", [issue("config.rank_invalid", value=as_json(rank))])
        return None
    if rank > max_rank:
        recorder.record(
            "config.rank", [issue("config.rank_too_high", rank=rank, max_rank=max_rank)]
        )
        return rank  # still a usable number for the tensor checks
    recorder.record("config.rank", [])
    return rank


def _check_alpha(config: dict[str, Any], recorder: Recorder) -> float | None:
    if "lora_alpha" not in config:
        recorder.record("config.alpha", [issue("config.field_missing", field="lora_alpha")])
        return None
    alpha = config["lora_alpha"]
    value = _as_finite_float(alpha)
    ok = value is not None and value > 0
    recorder.record(
        "config.alpha", [] if ok else [issue("config.alpha_invalid", value=as_json(alpha))]
    )
    return value if ok else None


def _as_finite_float(value: Any) -> float | None:
    """A number as the float column stores it; None when it has none (inf, or an int too
    large for a double: float() raises OverflowError)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _unsupported_features(config: dict[str, Any]) -> list[Issue]:
    """The PEFT features vLLM 0.32 refuses or silently ignores (both change what is served)."""
    found: list[Issue] = []
    for key in (
        "lora_bias",
        "use_qalora",
        "use_bdlora",
        "alora_invocation_tokens",
        "layer_replication",
        "target_parameters",
        "trainable_token_indices",
        "fan_in_fan_out",
    ):
        if config.get(key):
            found.append(
                issue("config.feature_not_supported", field=key, value=as_json(config[key]))
            )
    init = config.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in _PLAIN_INITS:
        # PiSSA, OLoRA, LoftQ... modify the base weights: served on the shared base they differ.
        found.append(
            issue("config.feature_not_supported", field="init_lora_weights", value=as_json(init))
        )
    return found


def _check_target_modules(
    config: dict[str, Any], spec: BaseModelSpec, recorder: Recorder
) -> tuple[str, ...] | None:
    targets = config.get("target_modules")
    if targets is None:
        recorder.record(
            "config.target_modules", [issue("config.field_missing", field="target_modules")]
        )
        return None
    if (
        not isinstance(targets, list)
        or not targets
        or not all(isinstance(t, str) and t for t in targets)
    ):
        recorder.record(
            "config.target_modules",
            [issue("config.target_modules_invalid", value=as_json(targets))],
        )
        return None
    known = ", ".join(spec.module_dims)
    modules: list[str] = []
    problems: list[Issue] = []
    for target in dict.fromkeys(targets):
        # PEFT matches a target by its last name component; "self_attn.q_proj" means q_proj.
        short = target.rsplit(".", 1)[-1]
        known_module = short in spec.module_dims and (
            "." not in target or target == spec.module_path(short)
        )
        if not known_module:
            problems.append(
                issue(
                    "config.target_module_unknown", module=target, base_model=spec.name, known=known
                )
            )
        else:
            modules.append(short)
    recorder.record("config.target_modules", problems)
    return tuple(dict.fromkeys(modules)) if not problems else None


def _check_base_model(config: dict[str, Any], spec: BaseModelSpec) -> list[Issue]:
    value = config.get("base_model_name_or_path")
    # Information only: compared as a string, never opened, never resolved as a path.
    if isinstance(value, str) and value.rstrip("/") in spec.accepted_names:
        return []
    return [
        issue(
            "config.base_model_mismatch",
            value=as_json(value),
            base_model=spec.name,
            accepted=", ".join(spec.accepted_names),
        )
    ]
