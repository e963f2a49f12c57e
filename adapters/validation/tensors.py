"""Checks of the tensors a header declares: LoRA A/B pairs for the base model's modules, with
shapes [r, in] / [out, r] from its dimensions and the config's r."""

from __future__ import annotations

import re
from dataclasses import dataclass

from adapters.validation.base_model import BaseModelSpec
from adapters.validation.codes import Issue, issue
from adapters.validation.peft_config import LoraConfig
from adapters.validation.report import Recorder
from adapters.validation.safetensors_header import SafetensorsHeader, TensorEntry

FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
# No leading zeros in the layer number: "layers.01" would alias "layers.1" for some loaders.
_LORA_NAME = re.compile(
    r"base_model\.model\.model\.layers\.(0|[1-9][0-9]{0,5})\.([a-z_]+)\.([a-z_]+)\.lora_([AB])\.weight"
)


@dataclass(frozen=True)
class _Lora:
    entry: TensorEntry
    layer: int
    module: str
    matrix: str  # "A" or "B"


@dataclass(frozen=True)
class TensorSummary:
    dtype: str | None  # the one dtype of all tensors, "mixed", or None without tensors
    modules: tuple[str, ...]


def check_tensors(
    header: SafetensorsHeader, *, spec: BaseModelSpec, config: LoraConfig | None, recorder: Recorder
) -> TensorSummary:
    entries = header.tensors
    recorder.record("tensors.present", [] if entries else [issue("tensors.none")])
    loras, name_issues = _parse_names(entries, spec)
    recorder.record("tensors.names", name_issues)
    recorder.record(
        "tensors.dtypes",
        [
            issue("tensors.dtype_not_float", name=e.name, dtype=e.dtype)
            for e in entries
            if e.dtype not in FLOAT_DTYPES
        ],
    )
    recorder.record("tensors.pairs", _check_pairs(loras))
    rank = config.rank if config else None
    shape_issues, rank_issues = _check_shapes(loras, spec, rank)
    recorder.record("tensors.shapes", shape_issues)
    if rank is None:
        recorder.skip("tensors.rank")
    else:
        recorder.record("tensors.rank", rank_issues)
    modules = tuple(dict.fromkeys(lora.module for lora in loras))
    targets = config.target_modules if config else None
    if targets is None:
        recorder.skip("tensors.targets")
    else:
        recorder.record("tensors.targets", _check_targets(loras, modules, targets))
    dtypes = {e.dtype for e in entries}
    dtype = dtypes.pop() if len(dtypes) == 1 else ("mixed" if dtypes else None)
    return TensorSummary(dtype=dtype, modules=modules)


def _parse_names(
    entries: tuple[TensorEntry, ...], spec: BaseModelSpec
) -> tuple[list[_Lora], list[Issue]]:
    loras: list[_Lora] = []
    problems: list[Issue] = []
    known = ", ".join(spec.module_dims)
    for entry in entries:
        match = _LORA_NAME.fullmatch(entry.name)
        if match is None:
            problems.append(issue("tensors.name_invalid", name=entry.name))
            continue
        layer, parent, module, matrix = int(match[1]), match[2], match[3], match[4]
        if module not in spec.module_dims or spec.module_path(module) != f"{parent}.{module}":
            problems.append(
                issue(
                    "tensors.module_unknown",
                    name=entry.name,
                    module=f"{parent}.{module}",
                    base_model=spec.name,
                    known=known,
                )
            )
            continue
        if layer >= spec.num_layers:
            problems.append(
                issue(
                    "tensors.layer_out_of_range",
                    name=entry.name,
                    layer=layer,
                    base_model=spec.name,
                    last=spec.num_layers - 1,
                )
            )
            continue
        loras.append(_Lora(entry=entry, layer=layer, module=module, matrix=matrix))
    return loras, problems


def _check_pairs(loras: list[_Lora]) -> list[Issue]:
    present = {(lora.layer, lora.module, lora.matrix) for lora in loras}
    problems = []
    for lora in loras:
        other = "B" if lora.matrix == "A" else "A"
        if (lora.layer, lora.module, other) not in present:
            missing = lora.entry.name.replace(f"lora_{lora.matrix}.", f"lora_{other}.")
            problems.append(issue("tensors.pair_incomplete", name=lora.entry.name, missing=missing))
    return problems


def _check_shapes(
    loras: list[_Lora], spec: BaseModelSpec, rank: int | None
) -> tuple[list[Issue], list[Issue]]:
    """A is [r, in], B is [out, r]. Dims against the base model; r against the config."""
    shape_issues: list[Issue] = []
    rank_issues: list[Issue] = []
    for lora in loras:
        entry = lora.entry
        shape = list(entry.shape)
        if len(shape) != 2:
            shape_issues.append(issue("tensors.not_2d", name=entry.name, shape=shape))
            continue
        d_in, d_out = spec.module_dims[lora.module]
        found_rank, dim, expected_dim = (
            (shape[0], shape[1], d_in) if lora.matrix == "A" else (shape[1], shape[0], d_out)
        )
        if dim != expected_dim or found_rank < 1:
            r = rank or "r"
            expected = f"[{r}, {d_in}]" if lora.matrix == "A" else f"[{d_out}, {r}]"
            shape_issues.append(
                issue(
                    "tensors.shape_mismatch",
                    name=entry.name,
                    shape=shape,
                    base_model=spec.name,
                    expected=expected,
                )
            )
        elif rank is not None and found_rank != rank:
            rank_issues.append(
                issue("tensors.rank_mismatch", name=entry.name, found=found_rank, rank=rank)
            )
    return shape_issues, rank_issues


def _check_targets(
    loras: list[_Lora], modules: tuple[str, ...], targets: tuple[str, ...]
) -> list[Issue]:
    problems = [
        issue(
            "tensors.module_not_targeted",
            name=lora.entry.name,
            module=lora.module,
            targets=list(targets),
        )
        for lora in loras
        if lora.module not in targets
    ]
    problems += [
        issue("tensors.target_module_missing", module=target)
        for target in targets
        if target not in modules
    ]
    return problems
