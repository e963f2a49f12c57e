"""bench/release_cost.py's arithmetic and report on made-up numbers (no engines, no database):
the goal is the planned arm's p50 minus the no-plan arm's, the worst kind deciding, and a
difference above 0.1 ms is reported as not met."""

from __future__ import annotations

from bench import gateway_support as gs
from bench import release_cost as rc


def _s(p50: float, p99: float | None = None) -> gs.Summary:
    return gs.Summary(n=1000, errors=0, p50=p50, p99=p99 or p50 * 3, mean=p50)


def _result(stub_plan_100: float) -> rc.CostResult:
    stub = {
        "chat": {"direct": _s(0.2), "none": _s(1.9), "10%": _s(1.95), "100%": _s(stub_plan_100)},
        "completions": {"direct": _s(0.2), "none": _s(1.8), "10%": _s(1.78), "100%": _s(1.83)},
    }
    engine = {
        "chat": {"direct": _s(20.0), "none": _s(21.5), "10%": _s(21.4), "100%": _s(21.55)},
    }
    return rc.CostResult(
        latency={"stub": stub, "engine": engine},
        paired={
            "stub": {"chat": {"10%": 0.04, "100%": 0.05}, "completions": {"10%": -0.01}},
            "engine": {"chat": {"10%": -0.02, "100%": 0.03}},
        },
        cpu_ms={"none": 0.60, "10%": 0.61, "100%": 0.63},
        rps={"none": 700.0, "10%": 690.0, "100%": 680.0},
        samples={"offered": 5200, "sent": 5100, "dropped": 100, "scored": 5100, "left": 0},
        requests=1000,
        warmup=50,
        stub_requests=3000,
        concurrency=16,
        engine_cpus="0",
        stream_tokens=2,
        offer_us={"kept": 2.9, "dropped": 0.14},
        offer_body_bytes=251,
    )


def test_the_goal_is_the_planned_arms_p50_minus_no_plans_worst_kind_deciding():
    r = _result(stub_plan_100=1.98)
    assert round(r.plan_minus_none("stub", "chat", "100%"), 3) == 0.08
    assert round(r.added("stub", "chat", "none")[0], 3) == 1.7
    goals = {goal: (value, met) for goal, value, met in r.goals()}
    stub_100 = goals[
        "added p50 with a plan sampling 100% within 0.1 ms of no plan (worst kind, stub engine)"
    ]
    assert stub_100 == ("+0.080 ms (chat)", True)
    stub_10 = goals[
        "added p50 with a plan sampling 10% within 0.1 ms of no plan (worst kind, stub engine)"
    ]
    assert stub_10 == ("+0.050 ms (chat)", True)


def test_a_difference_above_the_goal_is_not_met_and_the_report_says_so():
    r = _result(stub_plan_100=2.05)
    met = {goal: ok for goal, _value, ok in r.goals()}
    assert not met[
        "added p50 with a plan sampling 100% within 0.1 ms of no plan (worst kind, stub engine)"
    ]
    text = rc.render(r, "cmd")
    assert text.startswith(rc.BEGIN) and text.endswith(rc.END)
    assert "| +0.150 ms (chat) | no |" in text
    assert "[+0.150, +0.050]" in text  # p50 difference, then the paired median
    assert "0.630 (+0.030)" in text  # CPU ms per request against no plan
    assert "5200 offered by the gateway, 5100 sent to Redis, 100 dropped" in text
    assert "2.9 us per sample kept" in text
