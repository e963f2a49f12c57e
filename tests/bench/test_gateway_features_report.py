"""The every-feature-on bench's arithmetic and goals (bench/gateway_features.py): each kind must
meet the latency goals, the classes' cost is on minus off, the CPU goal reads the median run."""

from __future__ import annotations

from bench import gateway_support as gs
from bench.docs_section import markers
from bench.gateway_features import FeaturesResult, render


def summary(p50: float, p99: float) -> gs.Summary:
    return gs.Summary(n=100, errors=0, p50=p50, p99=p99, mean=p50)


def result(gateway_chat_p50: float, classes_off_p50: float, cpu: list[float]) -> FeaturesResult:
    per_kind = {
        "chat": {
            "direct": summary(8.0, 10.0),
            "gateway": summary(gateway_chat_p50, 11.0),
            "classes off": summary(classes_off_p50, 11.0),
        },
        "chat, streaming": {
            "direct": summary(9.0, 12.0),
            "gateway": summary(9.5, 13.0),
            "classes off": summary(9.45, 13.0),
        },
    }
    return FeaturesResult(
        latency=per_kind,
        paired={"chat": {"gateway": 0.6}},
        cpu={"gateway": cpu, "classes off": [0.40, 0.41]},
        rps={"gateway": [2300.0, 2200.0], "classes off": [2350.0, 2250.0]},
        engine_rps={"gateway": 200.0, "classes off": 201.0},
        requests=100,
        load_requests=100,
        stub_requests=1000,
        concurrency=16,
    )


def test_every_goal_met_when_each_kind_is_within_them():
    r = result(8.7, 8.65, [0.44, 0.43])
    assert [met for *_, met in r.goals()] == [True, True, True, True]
    assert abs(r.classes_cost("chat") - 0.05) < 1e-9
    assert abs(r.cpu_ms("gateway") - 0.435) < 1e-9


def test_one_kind_over_a_goal_fails_it_and_is_named():
    r = result(9.2, 8.9, [0.46, 0.47])  # chat adds 1.2 ms; classes cost 0.3 ms; CPU 0.465 ms
    goals = {goal.split(",")[0]: (measured, met) for goal, measured, met in r.goals()}
    assert goals["added p50 < 1 ms"] == ("worst +1.20 ms (chat)", False)
    assert goals["added p99 < 3 ms"][1] is True
    assert goals["gateway CPU per request <= 0.45 ms (stub engine"][1] is False
    classes = next(v for k, v in goals.items() if k.startswith("service classes"))
    assert classes == ("worst +0.30 ms (chat)", False)


def test_the_section_carries_its_markers_goals_and_both_gateways():
    begin, end = markers("gateway-overhead-features")
    text = render(result(8.7, 8.65, [0.44, 0.43]), "python -m bench.gateway_overhead --features")
    assert text.startswith(begin) and text.rstrip().endswith(end)
    assert "| classes off | 0.400, 0.410 | **0.405** |" in text
    assert "| chat | 8.00 / 10.00 | 8.70 / 11.00 | **+0.70 / +1.00** | +0.60 |" in text


def test_the_code_before_is_set_beside_the_change_when_run():
    r = result(8.7, 8.65, [0.44, 0.43])
    for kind, per in r.latency.items():
        per["before"] = summary(per["gateway"].p50 + 0.5, per["gateway"].p99 + 1.0)
        assert kind
    r.cpu["before"] = [0.50, 0.52]
    r.rps["before"] = [2000.0, 2100.0]
    r.before = "b8fa2d6"
    text = render(r, "python -m bench.gateway_overhead --features --before /tmp/base")
    assert "commit b8fa2d6" in text
    assert "| chat | +1.20 / +2.00 | +0.70 / +1.00 | +0.50 |" in text
    assert "| CPU ms / request (stub) | 0.510 | 0.435 | +0.075 |" in text
