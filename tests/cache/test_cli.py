"""The two command lines: a trace file in, the documented JSON out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cachesim.__main__ import main as sim_main
from bench.cachesim.trace import main as trace_main

KEYS = (
    "requests",
    "gpu_hits",
    "cpu_hits",
    "cold_loads",
    "bytes_loaded",
    "evictions",
    "ttft_p50_ms",
    "ttft_p99_ms",
)


def test_json_has_the_documented_fields_overall_and_per_slo_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace_main(["--adapters", "12", "--requests", "300", "--seed", "2", "--out", str(trace)])
    args = ["--trace", str(trace), "--gpu-slots", "2", "--cpu-slots", "4", "--json"]
    sim_main([*args, "--policy", "portal", "--sequential"])
    out = json.loads(capsys.readouterr().out)
    for key in KEYS:
        assert key in out, key
        for cls in ("gold", "silver", "bronze"):
            assert key in out["by_slo"][cls], (cls, key)
    assert out["requests"] == 300
    assert out["gpu_hits"] + out["cpu_hits"] + out["cold_requests"] == 300


def test_it_refuses_fewer_cache_slots_than_gpu_slots(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    with pytest.raises(SystemExit):
        sim_main(["--trace", str(trace), "--policy", "lru", "--gpu-slots", "4", "--cpu-slots", "2"])
