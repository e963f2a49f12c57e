"""bench/live_fanout.py's arithmetic and report: delays by nearest rank, CPU per subscriber,
and the goal's verdict per run."""

from __future__ import annotations

from typing import Any

from bench.live_fanout import Result, Run, render, summarize_delays


def run(**kw) -> Run:
    fields: dict[str, Any] = dict(
        mode="generation",
        seconds=60.0,
        connected=500,
        expected_messages=30_000,
        received=29_990,
        delay_p50_ms=12.0,
        delay_p99_ms=80.0,
        delay_max_ms=300.0,
        most_in_one_second=1,
        foreign_versions=0,
        server_cpu_s=15.0,
        publisher_cpu_s=1.2,
        client_cpu_s=9.0,
        loadavg_before=1.0,
        loadavg_after=2.0,
    )
    fields.update(kw)
    return Run(**fields)


def result(*runs: Run) -> Result:
    return Result(
        server="uvicorn",
        subscribers=500,
        tenants=50,
        machine="x86_64, 2 cores",
        started="2026-11-30 17:00 UTC",
        runs=list(runs),
    )


def test_delays_are_nearest_rank_percentiles():
    delays = [float(i) for i in range(1, 101)]
    assert summarize_delays(delays) == (50.0, 99.0, 100.0)


def test_cpu_per_subscriber_is_per_second_of_the_window():
    # 15 CPU-s over 60 s for 500 sockets: 0.5 CPU-ms per subscriber per second.
    assert run().server_cpu_ms_per_subscriber_second == 0.5


def test_the_report_has_a_column_per_run_and_says_whether_the_goal_is_met():
    text = render(result(run(), run(mode="every-message", delay_p99_ms=251.0)), "cmd")
    assert "| measure | generation | every-message |" in text
    assert "| delay p99 (goal < 250 ms) | 80.0 ms (met) | 251.0 ms (NOT met) |" in text
    assert "0.500 CPU-ms/s" in text
    assert text.startswith("<!-- live-fanout:begin -->")
    assert text.rstrip().endswith("<!-- live-fanout:end -->")
