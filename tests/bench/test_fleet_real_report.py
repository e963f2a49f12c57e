"""bench/fleet_real.py's arithmetic and report on made-up numbers (no engines, no database)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.docs_section import write_section
from bench.fleet_real import (
    BEGIN,
    END,
    BenchResult,
    RestartSample,
    quantiles,
    render,
    split_release,
)

T = 1_800_000_000.0  # an epoch second; the bench's times are all on one clock


def _release(total: float = 2.0, engine: str = "bench-a"):
    # called T; received +0.05; returned +0.08; pass started +0.30; stage 0.10 s + load 0.40 s
    # end at total - 0.02
    load_end = T + total - 0.02
    return split_release(
        engine=engine,
        called=T,
        returned=T + 0.08,
        received=T + 0.05,
        pass_started=T + 0.30,
        load_end=load_end,
        load_ms=500.0,
        stage_ms=100.0,
        resident=T + total,
    )


def _restart(restore: float, load: float = 1.0, down: bool = True) -> RestartSample:
    return RestartSample(
        stop_s=3.0,
        start_s=40.0,
        restore_s=restore,
        load_s=load,
        reconcile_s=10.0,
        marked_down=down,
        back_s=restore - load - 0.5 if down else None,
        pass_s=restore - load - 0.2,
    )


def _result(restarts: list[RestartSample]) -> BenchResult:
    releases = [
        _release(total=1.0 + i / 10, engine="bench-a" if i % 2 else "bench-b") for i in range(10)
    ]
    return BenchResult(
        releases=releases,
        warmup=[_release(total=5.0)],
        restarts=restarts,
        reconcile_s=10.0,
        probe_s=30.0,
        k=2,
        engine_start_s=[80.0, 85.0],
        seconds=420.0,
        load_average=2.5,
        adapter_bytes=29_500,
        other_engines=3,
        cores=2,
    )


def test_a_release_splits_into_parts_that_add_up_to_the_total():
    s = _release(total=2.0)
    assert s.call_s == pytest.approx(0.08)
    assert s.enqueue_s == pytest.approx(0.05)
    assert s.pickup_s == pytest.approx(0.25)
    assert s.plan_s == pytest.approx(T + 2.0 - 0.02 - 0.5 - (T + 0.30))
    assert s.stage_s == pytest.approx(0.1)
    assert s.load_s == pytest.approx(0.4)
    assert s.seen_s == pytest.approx(0.02)
    parts = s.enqueue_s + s.pickup_s + s.plan_s + s.stage_s + s.load_s + s.seen_s
    assert parts == pytest.approx(s.total_s)


def test_quantiles_are_nearest_rank_so_p95_of_ten_is_the_largest():
    q = quantiles([float(v) for v in range(10, 0, -1)])
    assert q == {"p50": 5.0, "p95": 10.0, "max": 10.0}
    assert quantiles([3.0]) == {"p50": 3.0, "p95": 3.0, "max": 3.0}
    assert quantiles([float(v) for v in range(1, 101)])["p95"] == 95.0


def test_the_restart_goal_is_one_reconcile_period_plus_the_load_time():
    assert _restart(restore=10.9, load=1.0).goal_s == 11.0
    assert _restart(restore=10.9, load=1.0).met
    assert _restart(restore=11.0, load=1.0).met  # within means at most
    assert not _restart(restore=11.1, load=1.0).met


def test_the_goal_is_met_only_when_every_restart_meets_it():
    assert _result([_restart(5.0), _restart(8.0)]).goal_met()
    assert not _result([_restart(5.0), _restart(25.0)]).goal_met()
    assert not _result([]).goal_met()  # nothing measured is not a pass


def test_the_report_has_markers_numbers_the_command_and_the_verdict():
    text = render(_result([_restart(5.0, down=False), _restart(25.0)]), "the command --x")
    assert text.startswith(BEGIN) and text.rstrip().endswith(END)
    assert "`the command --x`" in text
    assert "1 of 2 restarts within it (NOT met)" in text
    assert "| 2 | 3.0 | 40.0 | 25.00 | 1.00 | 11.00 | NO | yes | 23.50 | 23.80 |" in text
    assert "| 1 | 3.0 | 40.0 | 5.00 | 1.00 | 11.00 | yes | no | - | 3.80 |" in text
    # release totals 1.0..1.9: p50 the 5th (1.4), p95 and max the 10th (1.9)
    assert "| **release -> resident (total)** | 1.40 | 1.90 | 1.90 |" in text
    assert "| received -> converge pass started (worker pickup) | 0.25 | 0.25 | 0.25 |" in text
    assert "returned after 0.08 s p50 (0.08 s max)" in text
    assert (
        "Landed on: bench-a 5x, bench-b 5x; warm-up release (first load of the run) 5.00 s." in text
    )
    assert "reconcile every 10 s, engine prober every 30 s" in text
    assert "up to 3 other vLLM engines running" in text
    assert "Rank-8 adapters on q/v (30 kB each)" in text
    assert "p95 is the nearest rank (sample 10 of 10 in ascending order)" in text
    assert "Missed: #2 by 14.00 s." in text


def test_a_met_goal_says_so_and_names_no_miss(tmp_path: Path):
    text = render(_result([_restart(5.0, down=False)]), "cmd")
    assert "1 of 1 restarts within it (met)" in text
    assert "Missed:" not in text
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nother section\n")
    write_section("fleet-real", text, doc=doc)
    write_section("fleet-real", text, doc=doc)  # rewriting replaces it, once
    written = doc.read_text()
    assert "other section" in written
    assert written.count(BEGIN) == 1 and written.count(END) == 1
