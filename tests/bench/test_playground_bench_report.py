"""bench/playground_latency.py's arithmetic and report on made-up numbers (no engine, no database)."""

from __future__ import annotations

import json
from dataclasses import asdict

from bench import gateway_support as gs
from bench import playground_latency as bench


def result(direct: list[float], gateway: list[float], playground: list[float]) -> bench.Result:
    summary = {
        "direct": gs.Summary.of(direct),
        "gateway": gs.Summary.of(gateway),
        "playground": gs.Summary.of(playground, errors=1),
    }
    return bench.Result(
        summary, rounds=3, max_tokens=4, machine="2 cores", seconds=9, engine_start_s=60
    )


def test_added_latency_is_against_the_engines_own_ttft():
    r = result([10, 10, 30], [12, 12, 33], [15, 16, 45])
    assert r.added("playground") == (6, 15)
    assert r.added("gateway") == (2, 3)
    assert r.goal_met()


def test_the_goal_fails_when_p99_adds_20_ms_or_more():
    assert not result([10, 10, 30], [12, 12, 33], [12, 12, 50]).goal_met()


def test_the_report_names_the_command_the_paths_and_the_verdict(tmp_path):
    r = result([10, 10, 30], [12, 12, 33], [12, 12, 50])
    text = bench.render(r, "make bench-playground")
    assert text.startswith("<!-- playground-latency:begin -->")
    assert text.endswith("<!-- playground-latency:end -->")
    assert "`make bench-playground`" in text
    assert "| playground | 12.0 | 50.0 |" in text and "| 3 | 1 |" in text
    assert "p99 **+20.0 ms**" in text and "**NOT met**" in text


def test_a_saved_result_renders_again(tmp_path, monkeypatch):
    r = result([10, 10, 30], [12, 12, 33], [15, 16, 45])
    (tmp_path / "result.json").write_text(json.dumps(asdict(r)))
    assert bench.load_result(tmp_path) == r
