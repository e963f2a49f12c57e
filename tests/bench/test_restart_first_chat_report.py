"""bench.restart_first_chat's report on made-up numbers: the per-restart table, the medians and
the goal's verdict (a chat refused after the API showed the version resident misses it)."""

from __future__ import annotations

from bench.restart_first_chat import BenchResult, RestartSample, render


def _result(*refused: list[str]) -> BenchResult:
    samples = [
        RestartSample(ping_s=40.0 + i, shown_s=43.0 + i, served_s=43.2 + i, refused=r)
        for i, r in enumerate(refused)
    ]
    return BenchResult(samples, engine_start_s=60.0, seconds=400.0, load_average=3.5)


def test_the_report_lists_each_restart_and_the_medians():
    text = render(_result([], [], []), ".venv/bin/python -m bench.restart_first_chat")
    assert text.startswith("<!-- restart-first-chat:begin -->")
    assert "| 1 | 40.0 | 3.00 | 0.20 | 3.20 | 0 |" in text
    assert "API shows resident -> served 0.20 s" in text
    assert "/ping -> served 3.20 s" in text
    assert "Goal (the first chat after the API shows the version resident is served): met" in text


def test_a_chat_refused_after_the_api_showed_it_misses_the_goal():
    text = render(_result([], ["503 No engine can serve this model right now"]), "cmd")
    assert "| 2 | 41.0 | 3.00 | 0.20 | 3.20 | 1 |" in text
    assert ": not met." in text
