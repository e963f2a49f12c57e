"""The flag advisor: each rule, "too little traffic", its inputs from fleet rows, and the command
line and `--lora-modules` entries checked by vLLM 0.32's own parser (in the engine venv)."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from adapters.models import AdapterVersion
from workers import models as worker_models
from workers.advisor import (
    VALID_MAX_LORA_RANKS,
    AdvisorInputs,
    advise,
    count_reloaded_soon_after,
    inflight_quantile,
    launch_flags,
    max_distinct_within,
    smallest_valid_rank,
)
from workers.advisor_selectors import advisor_inputs_for, lora_modules
from workers.models import Engine, FleetAction, Residency

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PY = ROOT / ".venv-engine" / "bin" / "python"
T0 = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)

BASE = AdvisorInputs(
    engine="e1", current_max_loras=4, current_max_cpu_loras=8, current_max_lora_rank=64
)


def busy(*pairs: tuple[float, int]) -> tuple[tuple[float, int], ...]:
    return tuple(pairs)


# --- max_lora_rank ---


def test_the_rank_table_is_vllms():
    assert VALID_MAX_LORA_RANKS == worker_models.VALID_MAX_LORA_RANKS


@pytest.mark.parametrize(
    ("rank", "expected"),
    [(1, 1), (2, 8), (8, 8), (9, 16), (33, 64), (256, 256), (257, 320), (512, 512), (513, None)],
)
def test_smallest_valid_rank(rank, expected):
    assert smallest_valid_rank(rank) == expected


def test_a_rank_limit_far_above_every_adapter_is_lowered():
    advice = advise(replace(BASE, served_ranks=(8, 16, None)))
    assert advice.flags["max_lora_rank"] == 16
    assert "wastes memory" in advice.reasons[2] and "(was 64)" in advice.reasons[2]
    assert advice.changed


def test_a_rank_above_the_limit_raises_it_to_the_next_valid_value():
    advice = advise(replace(BASE, current_max_lora_rank=32, served_ranks=(8, 48)))
    assert advice.flags["max_lora_rank"] == 64
    assert "refuses to load" in advice.reasons[2]


def test_the_rank_is_kept_with_no_known_ranks_or_one_vllm_cannot_hold():
    assert advise(replace(BASE, served_ranks=())).flags["max_lora_rank"] == 64
    advice = advise(replace(BASE, served_ranks=(8, 600)))
    assert advice.flags["max_lora_rank"] == 64
    assert "600" in advice.reasons[2] and "cannot be loaded" in advice.reasons[2]


# --- max_loras ---


def test_inflight_quantile_is_time_weighted_over_busy_time_only():
    # 950 s with 2 in flight, 50 s with 5; idle time does not dilute it.
    samples = busy((950.0, 2), (50.0, 5), (100_000.0, 0))
    assert inflight_quantile(samples, 0.95) == 2
    assert inflight_quantile(busy((900.0, 2), (100.0, 5)), 0.95) == 5
    assert inflight_quantile((), 0.95) == 0


def test_max_loras_covers_95_percent_of_busy_time():
    advice = advise(replace(BASE, inflight=busy((950.0, 2), (50.0, 5), (5000.0, 0))))
    assert advice.flags["max_loras"] == 2
    assert "95% of the busy time had at most 2" in advice.reasons[0]
    advice = advise(replace(BASE, inflight=busy((800.0, 3), (200.0, 6))))
    assert advice.flags["max_loras"] == 6


def test_max_loras_is_at_least_one():
    advice = advise(replace(BASE, inflight=busy((1000.0, 1))))
    assert advice.flags["max_loras"] == 1


def test_pins_add_one_spare_slot_and_always_leave_one_unpinned():
    advice = advise(replace(BASE, pinned=1, inflight=busy((1000.0, 2))))
    assert advice.flags["max_loras"] == 3
    assert "+1 spare slot" in advice.reasons[0]
    advice = advise(replace(BASE, pinned=4, inflight=busy((1000.0, 1))))
    assert advice.flags["max_loras"] == 5
    assert "stays unpinned" in advice.reasons[0]


def test_too_little_traffic_keeps_max_loras_and_says_so():
    advice = advise(replace(BASE, inflight=busy((500.0, 9), (9000.0, 0))))
    assert advice.flags["max_loras"] == 4
    assert "too little traffic" in advice.reasons[0] and "500 s" in advice.reasons[0]
    # ...unless the pins alone need more slots than it has.
    advice = advise(replace(BASE, pinned=4))
    assert advice.flags["max_loras"] == 5


# --- max_cpu_loras ---


def test_cpu_cache_is_raised_when_evicted_versions_come_back_soon():
    advice = advise(
        replace(BASE, evictions=20, reloaded_soon_after=12, max_distinct_in_reload_window=13)
    )
    assert advice.flags["max_cpu_loras"] == 13
    assert "12 of 20 evicted versions" in advice.reasons[1] and "too small" in advice.reasons[1]


def test_cpu_cache_raise_is_capped():
    advice = advise(
        replace(
            BASE,
            evictions=20,
            reloaded_soon_after=20,
            max_distinct_in_reload_window=100,
            cpu_loras_cap=32,
        )
    )
    assert advice.flags["max_cpu_loras"] == 32
    assert "capped at 32" in advice.reasons[1]


@pytest.mark.parametrize(
    ("evictions", "reloaded", "distinct", "says"),
    [
        (0, 0, 30, "no evictions"),
        (4, 4, 30, "too little traffic"),
        (20, 4, 30, "evicts what is not needed again"),
        (20, 15, 6, "controller's policy"),
    ],
)
def test_cpu_cache_is_kept(evictions, reloaded, distinct, says):
    advice = advise(
        replace(
            BASE,
            evictions=evictions,
            reloaded_soon_after=reloaded,
            max_distinct_in_reload_window=distinct,
        )
    )
    assert advice.flags["max_cpu_loras"] == 8
    assert says in advice.reasons[1] and "kept" in advice.reasons[1]


def test_cpu_cache_is_never_below_max_loras():
    advice = advise(replace(BASE, current_max_cpu_loras=2, inflight=busy((1000.0, 3))))
    assert advice.flags == {"max_loras": 3, "max_cpu_loras": 3, "max_lora_rank": 64}
    assert "max_cpu_loras < max_loras" in advice.reasons[1]


def test_unchanged_advice_says_so():
    advice = advise(replace(BASE, served_ranks=(40,)))
    assert advice.flags == advice.current and not advice.changed
    assert all("kept" in reason for reason in advice.reasons)


# --- the selector's building blocks ---


def test_reloads_count_only_within_the_reload_window():
    minute = timedelta(minutes=1)
    events = [
        (T0, "evict", "a"),
        (T0 + 10 * minute, "load", "a"),  # exactly at the window: counts
        (T0, "evict", "b"),
        (T0 + 10 * minute + timedelta(seconds=1), "load", "b"),  # just after: does not
        (T0 + minute, "load", "c"),  # never evicted
        (T0 + 2 * minute, "evict", "c"),  # never reloaded
    ]
    events.sort(key=lambda e: e[0])
    assert count_reloaded_soon_after(events, reload_window_s=600) == (3, 1)


def test_max_distinct_within_slides_the_span():
    minute = timedelta(minutes=1)
    uses = [(T0, "a"), (T0 + minute, "b"), (T0 + 2 * minute, "a"), (T0 + 12 * minute, "c")]
    assert max_distinct_within(uses, width_s=600) == 2
    assert max_distinct_within(uses, width_s=660) == 3
    assert max_distinct_within([], width_s=600) == 0


# --- from rows ---


def _engine(world, name="e1", **kwargs) -> Engine:
    defaults = {
        "base_model": world.base,
        "url": f"http://{name}.internal:8000",
        "served_model_name": "tiny-base",
        "adapter_root": "/srv/adapters",
    }
    return Engine.objects.create(name=name, **{**defaults, **kwargs})


def _version(world, number: int, rank: int | None = 8, size: int = 1000) -> AdapterVersion:
    return AdapterVersion.objects.create(
        tenant=world.acme,
        adapter=world.support,
        number=number,
        served_name=f"acme--support--v{number}-0000000{number}",
        rank=rank,
        size_bytes=size,
        status="active",
    )


def _action(engine, version, kind, at, ok=True, latency=None) -> FleetAction:
    return FleetAction.objects.create(
        engine=engine,
        version=version,
        served_name=version.served_name,
        kind=kind,
        created_at=at,
        ok=ok,
        latency_ms=latency,
    )


def test_inputs_from_rows(world):
    engine = _engine(world)
    v1, v2, v3, v4 = (_version(world, n, rank) for n, rank in ((1, 8), (2, 16), (3, 64), (4, 8)))
    Residency.objects.create(engine=engine, version=v1, desired_state="registered")
    Residency.objects.create(
        engine=engine, version=v2, desired_state="pinned", last_used_at=T0 - timedelta(minutes=1)
    )
    Residency.objects.create(engine=engine, version=v3, desired_state="absent")  # leaving
    now = T0
    minute = timedelta(minutes=1)
    for i in range(6):  # v1 and v4 evicted and loaded again 2 min later, six times
        start = now - (50 - 8 * i) * minute
        _action(engine, v1, "evict", start)
        _action(engine, v1, "load", start + 2 * minute)
        _action(engine, v4, "unload", start)
        _action(engine, v4, "load", start + 2 * minute)
    _action(engine, v3, "evict", now - timedelta(hours=2))  # outside the window
    _action(engine, v3, "load", now - 5 * minute, ok=False)  # failed: not a use
    inputs = advisor_inputs_for(engine, now=now, inflight=((1000.0, 2),))
    assert Counter(inputs.served_ranks) == Counter([8, 16])
    assert inputs.pinned == 1
    assert (inputs.evictions, inputs.reloaded_soon_after) == (12, 12)
    # v1 and v4 loaded, v2 last used: three versions within ten minutes.
    assert inputs.max_distinct_in_reload_window == 3
    advice = advise(inputs)
    assert advice.flags["max_lora_rank"] == 16
    assert advice.flags["max_loras"] == 3  # 2 in flight + 1 spare for the pin
    assert advice.flags["max_cpu_loras"] == 8  # 3 distinct fit in 8: not the cache's size


def test_an_engine_with_nothing_observed_keeps_its_flags(world):
    engine = _engine(world, max_loras=2, max_cpu_loras=4, max_lora_rank=16)
    advice = advise(advisor_inputs_for(engine, now=T0))
    assert advice.flags == {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 16}
    assert not advice.changed
    assert "too little traffic" in advice.reasons[0]


def test_lora_modules_list_the_desired_versions_under_the_adapter_root(world):
    engine = _engine(world, adapter_root="/srv/adapters/")
    other = _engine(world, name="e2")
    v1, v2, v3 = (_version(world, n) for n in (1, 2, 3))
    Residency.objects.create(engine=engine, version=v2, desired_state="resident_gpu")
    Residency.objects.create(engine=engine, version=v1, desired_state="registered")
    Residency.objects.create(engine=engine, version=v3, desired_state="absent")
    Residency.objects.create(engine=other, version=v3, desired_state="pinned")
    assert lora_modules(engine) == [
        {
            "name": v.served_name,
            "path": f"/srv/adapters/{v.served_name}",
            "base_model_name": "tiny-base",
        }
        for v in (v1, v2)
    ]


def test_launch_flags(world):
    engine = _engine(world, max_num_seqs=16)
    advice = advise(replace(BASE, served_ranks=(8,)))
    modules = [{"name": "a", "path": "/srv/adapters/a", "base_model_name": "tiny-base"}]
    flags = launch_flags(engine, advice, modules=modules)
    assert flags == [
        "--served-model-name",
        "tiny-base",
        "--enable-lora",
        "--max-loras",
        "4",
        "--max-cpu-loras",
        "8",
        "--max-lora-rank",
        "8",
        "--max-num-seqs",
        "16",
        "--lora-modules",
        '{"base_model_name": "tiny-base", "name": "a", "path": "/srv/adapters/a"}',
    ]
    assert "--lora-modules" not in launch_flags(engine, advice)


# --- vLLM's own parser ---

VLLM_PARSE = """
import dataclasses, json, sys
from vllm.config.lora import LoRAConfig
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

ns = make_arg_parser(FlexibleArgumentParser()).parse_args(json.loads(sys.stdin.read()))
LoRAConfig(max_lora_rank=ns.max_lora_rank, max_loras=ns.max_loras, max_cpu_loras=ns.max_cpu_loras)
print(json.dumps({
    "enable_lora": ns.enable_lora,
    "flags": [ns.max_loras, ns.max_cpu_loras, ns.max_lora_rank, ns.max_num_seqs],
    "served_model_name": ns.served_model_name,
    "modules": [dict(type=type(m).__name__, **dataclasses.asdict(m)) for m in ns.lora_modules],
}))
"""


def _vllm_parse(argv: list[str]) -> subprocess.CompletedProcess:
    assert ENGINE_PY.exists(), "the engine venv is missing: run `make engine-venv`"
    return subprocess.run(
        [str(ENGINE_PY), "-c", VLLM_PARSE],
        input=json.dumps(["--model", "/srv/base", *argv]),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_vllm_parses_the_flags_and_lora_modules(world):
    engine = _engine(world)
    versions = [_version(world, n) for n in (1, 2)]
    for version in versions:
        Residency.objects.create(engine=engine, version=version, desired_state="registered")
    advice = advise(replace(BASE, served_ranks=(8,), current_max_loras=2, current_max_cpu_loras=4))
    result = _vllm_parse(launch_flags(engine, advice, modules=lora_modules(engine)))
    assert result.returncode == 0, result.stderr[-2000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed["enable_lora"] is True
    assert parsed["flags"] == [2, 4, 8, 8]
    assert parsed["served_model_name"] == ["tiny-base"]
    assert parsed["modules"] == [
        {
            "type": "LoRAModulePath",
            "name": v.served_name,
            "path": f"/srv/adapters/{v.served_name}",
            "base_model_name": "tiny-base",
            "is_3d_lora_weight": False,
        }
        for v in versions
    ]


def test_vllm_refuses_what_the_advisor_must_never_produce():
    # The check above can fail: a field vLLM does not know, and a CPU cache below max_loras.
    bad_module = _vllm_parse(["--enable-lora", "--lora-modules", '{"name": "a", "root": "/x"}'])
    assert bad_module.returncode != 0 and "Invalid fields for --lora-modules" in bad_module.stderr
    small_cache = _vllm_parse(["--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"])
    assert small_cache.returncode != 0 and "max_cpu_loras (2) must be >=" in small_cache.stderr
