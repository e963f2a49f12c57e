"""bench/fleet_scale.py at a tiny size: the result's shape, a steady fleet with nothing to do,
and the same counts from the same seed (timings aside)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.docs_section import write_section
from bench.fleet_scale import BEGIN, END, SCENARIOS, render, run


@pytest.fixture(scope="module")
def tiny() -> dict:
    return run(engines=3, versions=200, seed=1, requests=500)


def _counts(result: dict) -> dict:
    return {
        name: (s["all"]["actions"], s["all"]["kinds"], s["all"]["skipped"], s["settle_passes"])
        for name, s in result["scenarios"].items()
    }


def test_it_reports_every_scenario_with_plan_times_and_a_fleet_total(tiny):
    assert tiny["config"] == {"engines": 3, "versions": 200, "seed": 1, "requests": 500}
    assert tuple(tiny["scenarios"]) == SCENARIOS
    for s in tiny["scenarios"].values():
        assert s["all"]["engines"] == 3
        assert set(s["all"]["plan_cpu_ms"]) == {"p50", "p95", "max"}
        assert s["all"]["plan_cpu_ms"]["p50"] <= s["all"]["plan_cpu_ms"]["max"]
        assert s["fleet_cpu_s"] > 0 and s["fleet_wall_s"] > 0
        assert s["fleet_cpu_s_tracker_per_engine"] >= s["fleet_cpu_s"]
        assert s["unsettled"] == []


def test_a_steady_fleet_plans_no_action_on_any_engine(tiny):
    steady = tiny["scenarios"]["steady"]["all"]
    assert steady["actions"] == 0
    assert steady["engines_with_actions"] == 0
    assert tiny["fleet"]["resident"] > 0  # the steady state is not an empty fleet


def test_a_restarted_engine_loads_its_wishes_again(tiny):
    restart = tiny["scenarios"]["restart"]
    assert restart["changed"]["engines"] == 1
    assert restart["changed"]["kinds"].get("load", 0) > 0
    assert restart["all"]["actions"] == restart["changed"]["actions"]  # the others: nothing


def test_a_miss_storm_loads_the_incoming_version_on_every_engine(tiny):
    assert tiny["scenarios"]["miss-storm"]["all"]["kinds"]["load"] >= 3


def test_the_same_seed_gives_the_same_plans(tiny):
    assert _counts(run(engines=3, versions=200, seed=1, requests=500)) == _counts(tiny)


def test_the_section_has_its_markers_and_says_whether_the_goal_is_met(tiny, tmp_path: Path):
    section = render(tiny, "python -m bench.fleet_scale --engines 3")
    assert section.startswith(BEGIN) and section.rstrip().endswith(END)
    assert "(met)" in section or "(NOT met)" in section
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n")
    write_section("fleet-scale", section, doc=doc)
    assert doc.read_text().count(BEGIN) == 1
