"""The flag advisor: what `--max-loras`, `--max-cpu-loras` and `--max-lora-rank` an engine should
run with, each with a reason a person can act on, and the vLLM command line that applies them.

Pure (no Django): `workers.advisor_selectors.advisor_inputs_for` builds `AdvisorInputs` from the
fleet's rows. The rules:

- `--max-lora-rank` = the smallest value vLLM accepts (1, 8, 16, 32, 64, 128, 256, 320, 512) that
  is >= every served rank. A limit far above every adapter's rank wastes memory: vLLM sizes its
  LoRA buffers by max_lora_rank x max_loras. A limit below one is refused at load time.
- `--max-loras` = the number of distinct adapters in flight at once that covers 95% of the busy
  observed time (time with at least one adapter request running: idle time has no batch to size),
  at least 1, plus 1 spare slot when versions are pinned, and always more than the number pinned
  (vLLM's engine dies when every GPU slot is pinned).
- `--max-cpu-loras`: raised when evictions are followed by a reload of the same version within the
  reload window (the engine's CPU cache is too small for the working set), to the number of
  distinct versions used within one reload window, capped; never below max_loras (vLLM refuses
  max_cpu_loras < max_loras).
- When there is too little traffic to tell, the advice says so and keeps the current value.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

# vLLM 0.32's `MaxLoRARanks` (vllm/config/lora.py); workers.models has the same tuple.
VALID_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
MAX_LORAS_COVERAGE = 0.95
# Busy time (seconds with any adapter request in flight) below which max_loras is not judged.
MIN_BUSY_SECONDS = 600.0
# Evictions in the window below which the CPU cache is not judged.
MIN_EVICTIONS = 5
# Share of evictions reloaded within the reload window that means "the cache is too small".
RELOAD_SHARE_TOO_SMALL = 0.25
DEFAULT_RELOAD_WINDOW_S = 600.0
DEFAULT_CPU_LORAS_CAP = 64


@dataclass(frozen=True)
class AdvisorInputs:
    """One engine's limits, what it serves, and what was observed in the last `window_s`."""

    engine: str
    current_max_loras: int
    current_max_cpu_loras: int
    current_max_lora_rank: int
    # Ranks of the versions registered or desired on the engine (None: rank unknown).
    served_ranks: tuple[int | None, ...] = ()
    pinned: int = 0
    # (seconds, distinct adapters with requests running) intervals; evenly spaced samples are
    # (interval, count) each. From vLLM's `lora_requests_info` running_lora_adapters.
    inflight: tuple[tuple[float, int], ...] = ()
    window_s: float = 3600.0
    evictions: int = 0
    reloaded_soon_after: int = 0  # evictions of a version loaded again within reload_window_s
    max_distinct_in_reload_window: int = 0
    reload_window_s: float = DEFAULT_RELOAD_WINDOW_S
    cpu_loras_cap: int = DEFAULT_CPU_LORAS_CAP


@dataclass(frozen=True)
class Advice:
    flags: dict[str, int]
    reasons: list[str]
    changed: bool
    current: dict[str, int] = field(default_factory=dict)


class EngineLike(Protocol):
    served_model_name: str
    max_num_seqs: int


# --- the rules ---


def advise(inputs: AdvisorInputs) -> Advice:
    """The three flags for one engine; reasons in the order max_loras, max_cpu_loras, rank."""
    rank, rank_reason = advise_max_lora_rank(inputs)
    loras, loras_reason = advise_max_loras(inputs)
    cpu, cpu_reason = advise_max_cpu_loras(inputs, max_loras=loras)
    flags = {"max_loras": loras, "max_cpu_loras": cpu, "max_lora_rank": rank}
    current = {
        "max_loras": inputs.current_max_loras,
        "max_cpu_loras": inputs.current_max_cpu_loras,
        "max_lora_rank": inputs.current_max_lora_rank,
    }
    return Advice(
        flags=flags,
        reasons=[loras_reason, cpu_reason, rank_reason],
        changed=flags != current,
        current=current,
    )


def smallest_valid_rank(rank: int) -> int | None:
    """The smallest max_lora_rank vLLM accepts that holds `rank`; None above 512."""
    return next((valid for valid in VALID_MAX_LORA_RANKS if valid >= rank), None)


def advise_max_lora_rank(inputs: AdvisorInputs) -> tuple[int, str]:
    current = inputs.current_max_lora_rank
    ranks = [rank for rank in inputs.served_ranks if rank]
    if not ranks:
        return current, (
            f"--max-lora-rank {current} kept: no version with a known rank is registered or "
            "desired on this engine."
        )
    top = max(ranks)
    value = smallest_valid_rank(top)
    if value is None:
        return current, (
            f"--max-lora-rank {current} kept: a served version has rank {top}, above the largest "
            f"limit vLLM accepts ({VALID_MAX_LORA_RANKS[-1]}); that version cannot be loaded, "
            "disable it."
        )
    if value < current:
        return value, (
            f"--max-lora-rank {value} (was {current}): the largest served rank is {top}; a limit "
            "far above every adapter's rank wastes memory (vLLM sizes its LoRA buffers by "
            "max_lora_rank x max_loras)."
        )
    if value > current:
        return value, (
            f"--max-lora-rank {value} (was {current}): a served version has rank {top}, above the "
            "current limit; vLLM refuses to load it."
        )
    return value, f"--max-lora-rank {value} kept: the smallest limit that holds rank {top}."


def inflight_quantile(inflight: Iterable[tuple[float, int]], coverage: float) -> int:
    """The smallest count c such that at least `coverage` of the busy time had <= c in flight."""
    busy = sorted((count, seconds) for seconds, count in inflight if count > 0 and seconds > 0)
    total = sum(seconds for _, seconds in busy)
    covered = 0.0
    for count, seconds in busy:
        covered += seconds
        if covered >= coverage * total:
            return count
    return 0


def advise_max_loras(inputs: AdvisorInputs) -> tuple[int, str]:
    current = inputs.current_max_loras
    floor = inputs.pinned + 1  # one GPU slot always unpinned, or vLLM's engine dies
    busy = sum(seconds for seconds, count in inputs.inflight if count > 0 and seconds > 0)
    if busy < MIN_BUSY_SECONDS:
        if current < floor:
            return floor, (
                f"--max-loras {floor} (was {current}): {inputs.pinned} version(s) are pinned and "
                "one GPU slot must stay unpinned. Too little traffic to size it further "
                f"({busy:.0f} s with requests in flight in the last {_minutes(inputs.window_s)}, "
                f"need {MIN_BUSY_SECONDS:.0f} s)."
            )
        return current, (
            f"--max-loras {current} kept: too little traffic to tell ({busy:.0f} s with adapter "
            f"requests in flight in the last {_minutes(inputs.window_s)}, need "
            f"{MIN_BUSY_SECONDS:.0f} s)."
        )
    working_set = max(1, inflight_quantile(inputs.inflight, MAX_LORAS_COVERAGE))
    value = working_set + (1 if inputs.pinned else 0)
    why = (
        f"{MAX_LORAS_COVERAGE:.0%} of the busy time had at most {working_set} distinct "
        "adapter(s) in flight at once"
    )
    if inputs.pinned:
        why += f"; +1 spare slot because {inputs.pinned} version(s) are pinned"
    if value < floor:
        value = floor
        why += f"; at least {floor} so one GPU slot stays unpinned"
    if value == current:
        return value, f"--max-loras {value} kept: {why}."
    return value, f"--max-loras {value} (was {current}): {why}."


def advise_max_cpu_loras(inputs: AdvisorInputs, *, max_loras: int) -> tuple[int, str]:
    current = inputs.current_max_cpu_loras
    window = _minutes(inputs.window_s)
    reload = _minutes(inputs.reload_window_s)
    value, why = current, ""
    if inputs.evictions == 0:
        why = f"kept: no evictions in the last {window}; the CPU cache holds the working set"
    elif inputs.evictions < MIN_EVICTIONS:
        why = (
            f"kept: too little traffic to tell ({inputs.evictions} eviction(s) in the last "
            f"{window}, need {MIN_EVICTIONS})"
        )
    elif inputs.reloaded_soon_after < RELOAD_SHARE_TOO_SMALL * inputs.evictions:
        why = (
            f"kept: {inputs.reloaded_soon_after} of {inputs.evictions} evictions in the last "
            f"{window} were reloaded within {reload}; the cache evicts what is not needed again"
        )
    elif inputs.max_distinct_in_reload_window <= current:
        why = (
            f"kept: {inputs.reloaded_soon_after} of {inputs.evictions} evicted versions came back "
            f"within {reload}, but at most {inputs.max_distinct_in_reload_window} distinct versions "
            f"were used within {reload}, which the cache already holds; the evictions come from "
            "the controller's policy (pins, desired states), not from the cache size"
        )
    else:
        value = min(inputs.max_distinct_in_reload_window, inputs.cpu_loras_cap)
        why = (
            f"{inputs.reloaded_soon_after} of {inputs.evictions} evicted versions in the last "
            f"{window} were loaded again within {reload} (the CPU cache is too small); "
            f"{inputs.max_distinct_in_reload_window} distinct versions were used within {reload}"
        )
        if value < inputs.max_distinct_in_reload_window:
            why += f", capped at {inputs.cpu_loras_cap}"
    if value < max_loras:
        value = max_loras
        why += f"; raised to --max-loras {max_loras} (vLLM refuses max_cpu_loras < max_loras)"
    if value == current:
        return value, f"--max-cpu-loras {value} {why}."
    return value, f"--max-cpu-loras {value} (was {current}): {why.removeprefix('kept: ')}."


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min"


# --- what the selector feeds the rules (pure, so they are tested without a database) ---


def count_reloaded_soon_after(
    events: Iterable[tuple[datetime, str, str]], *, reload_window_s: float
) -> tuple[int, int]:
    """(evictions, evictions whose version was loaded again within `reload_window_s`).

    `events` are (time, "evict" | "load", served name), in time order.
    """
    evicted_at: dict[str, datetime] = {}
    evictions = reloaded = 0
    for at, kind, name in events:
        if kind == "evict":
            evictions += 1
            evicted_at[name] = at
        elif kind == "load" and name in evicted_at:
            gap = (at - evicted_at.pop(name)).total_seconds()
            reloaded += gap <= reload_window_s
    return evictions, reloaded


def max_distinct_within(uses: Iterable[tuple[datetime, str]], *, width_s: float) -> int:
    """The most distinct names used within any `width_s` span (uses in any order)."""
    ordered = sorted(uses)
    in_span: Counter[str] = Counter()
    best = start = 0
    for at, name in ordered:
        in_span[name] += 1
        while (at - ordered[start][0]).total_seconds() > width_s:
            old = ordered[start][1]
            in_span[old] -= 1
            if not in_span[old]:
                del in_span[old]
            start += 1
        best = max(best, len(in_span))
    return best


# --- the command line ---


def lora_module_entry(
    *, served_name: str, adapter_root: str, base_model_name: str
) -> dict[str, str]:
    """One `--lora-modules` JSON entry as vLLM 0.32's LoRAParserAction reads it: a JSON object
    with the fields of LoRAModulePath (name, path, base_model_name). It always holds commas, so
    vLLM never mistakes it for the old `name=path` form."""
    return {
        "name": served_name,
        "path": f"{adapter_root.rstrip('/')}/{served_name}",
        "base_model_name": base_model_name,
    }


def launch_flags(
    engine: EngineLike, advice: Advice, *, modules: Sequence[dict[str, Any]] = ()
) -> list[str]:
    """vLLM's LoRA command-line flags for an engine run with `advice`; `--lora-modules` (one
    JSON argument per entry) comes last because it takes every argument after it."""
    flags = [
        "--served-model-name",
        engine.served_model_name,
        "--enable-lora",
        "--max-loras",
        str(advice.flags["max_loras"]),
        "--max-cpu-loras",
        str(advice.flags["max_cpu_loras"]),
        "--max-lora-rank",
        str(advice.flags["max_lora_rank"]),
        "--max-num-seqs",
        str(engine.max_num_seqs),
    ]
    if modules:
        flags += ["--lora-modules", *(json.dumps(entry, sort_keys=True) for entry in modules)]
    return flags
