"""bench/load.py's arithmetic: which answers are allowed, and growth over the soak's second half."""

from __future__ import annotations

from bench.load import Answer, Phase, growth


def test_only_served_streams_rate_and_capacity_answers_are_allowed():
    phase = Phase("burst", 60)
    phase.answers = [
        Answer(200, "", 10.0, 20.0),  # served
        Answer(429, "rate_limit_exceeded", None, 1.0),
        Answer(429, "concurrency_limit_exceeded", None, 1.0),
        Answer(503, "engine_busy", None, 1.0),
        Answer(503, "adapter_load_failed", None, 1.0),  # not allowed
        Answer(200, "stream_error", 10.0, 20.0),  # a 200 that ended in an error event
        Answer(0, "ReadError", None, 1.0),  # the connection broke
    ]
    assert phase.disallowed() == 3
    assert phase.by_code()["503 adapter_load_failed"] == 1


def test_growth_is_measured_over_the_second_half():
    samples = [{"p": {"rss": rss}} for rss in (100, 180, 200, 200, 201)]
    first, last, second_half = growth(samples, "p", "rss")
    assert (first, last, second_half) == (100, 201, 1)  # warm-up growth is not a leak


def test_an_empty_phase_has_zero_ttft():
    assert Phase("cold", 0).ttft().n == 0


def test_the_report_says_how_often_pins_moved_and_whether_the_engines_survived_the_burst():
    from bench.load import Result, render

    served = Phase("burst", 60)
    served.answers = [Answer(200, "", 10.0, 20.0)]
    result = Result(
        burst=served,
        cold=Phase("cold", 0),
        cold_loads=1,
        soak=Phase("soak", 60),
        samples=[],
        machine="2 cores",
        args={"burst_clients": 1, "adapters": 1, "cold_clients": 1, "soak_rate": 1},
        seconds=1.0,
        burst_pins={"load-a pin": 2, "load-a unpin": 1},
        alive_after_burst={"load-a": True, "load-b": False},
    )
    text = render(result, "python -m bench.load")
    assert "load-a pin: 2, load-a unpin: 1" in text
    assert "Engines after the burst: load-a running, load-b **gone**." in text
