"""Issue 12, round 2's open goals: follow-ups learnt from session traffic (goal 4) and the p99
floor no engine choice beats (goal 5)."""

from __future__ import annotations

import random

import pytest

from bench.cachesim import structured as st
from bench.cachesim.references import cold_percentile_chance, cold_percentile_floor
from workers.cache_policy import (
    DemandParams,
    DemandTracker,
    EngineSnapshot,
    Evict,
    PolicyParams,
    Resident,
    ScoreWeights,
    VersionInfo,
    keep_value,
    plan_actions,
)


def session_demand(requests: int = 3000, seed: int = 5) -> tuple[DemandTracker, list[str]]:
    trace, _ = st.sessions(st.SessionSpec(common=st.Common(requests=requests, seed=seed)))
    d = DemandTracker()
    for r in trace:
        d.observe(r.adapter, r.t)
    return d, [r.adapter for r in trace]


def gaps_now(names: list[str]) -> dict[str, int]:
    """For each version, the gap its next request would close (1: the very next request)."""
    out: dict[str, int] = {}
    for i, name in enumerate(names):
        out[name] = len(names) - i
    return out


def test_follow_ups_are_learnt_from_sessions_and_fade_with_age() -> None:
    d, names = session_demand()
    gap = gaps_now(names)
    fu = d.follow_ups(gap)
    recent = [v for v, g in gap.items() if g <= 6]
    old = [v for v, g in gap.items() if g > 200]
    assert recent and old
    # a version a session used a few requests ago is far likelier to come next than one nobody
    # asked for in 200 requests, whatever their shares
    assert min(fu[v] for v in recent) > 0.02
    assert max(fu[v] for v in old) < min(fu[v] for v in recent)
    near = d.near_shares(gap)
    for v in gap:
        assert near[v] >= fu[v]


def test_independent_draws_learn_no_follow_ups() -> None:
    rng = random.Random(11)
    names = [f"v{i}" for i in range(40)]
    weights = [1 / (i + 1) for i in range(40)]
    d = DemandTracker()
    for i in range(6000):
        d.observe(rng.choices(names, weights)[0], float(i))
    # no gap length returns more or less often than the shares say (a bin in the tail may pass
    # the z-test by chance, with a tiny addend)
    keep = d._keep_scale()
    learnt = [d._adjust(keep, b) for b in range(len(d._fu_edges))]
    assert sum(a != (1.0, 0.0) for a in learnt) <= 1
    assert all(factor == 1.0 and add < 0.01 for factor, add in learnt)
    # and the longest memory still predicts best, as without follow-ups
    assert d.long_half_life() == max(DemandParams().alt_long_half_lives)


def test_follow_ups_can_be_turned_off() -> None:
    trace, _ = st.sessions(st.SessionSpec(common=st.Common(requests=800, seed=2)))
    d = DemandTracker(DemandParams(follow_up_half_life=None))
    for r in trace:
        d.observe(r.adapter, r.t)
    names = {r.adapter for r in trace}
    assert d.near_shares(names) == {v: d.share(v) for v in names}


def info(name: str) -> VersionInfo:
    return VersionInfo(name, "t0", "bronze", 16, 32 * 2**20, 0.07)


def test_a_full_cache_keeps_the_live_session_and_evicts_an_idle_steadier_version() -> None:
    d, names = session_demand()
    gap = gaps_now(names)
    share = {v: names.count(v) / len(names) for v in gap}  # over the whole trace
    # live: a session turn a few requests ago on a version of small share; idle: a version of
    # larger share nobody asked for in a long while
    live = min((v for v, g in gap.items() if g <= 4), key=share.__getitem__)
    idle = max((v for v, g in gap.items() if g > 200 and share[v] < 0.05), key=share.__getitem__)
    assert share[live] < share[idle]
    resident = {
        live: Resident(live, "cpu", last_used=0.0),
        idle: Resident(idle, "cpu", last_used=0.0),
    }
    snap = EngineSnapshot(
        "e",
        0.0,
        1,
        2,
        128,
        resident,
        {v: info(v) for v in (live, idle, "new")},
        tenant_pin_quota={"t0": 0},
    )
    params = PolicyParams(weights=ScoreWeights(priority=0.0, load_cost=0.0))
    actions = plan_actions(snap, d, incoming="new", params=params)
    assert actions[0] == Evict(idle, "make room for new")
    # the controller's converge pass scores with keep_value: the same order
    w = params.weights
    assert keep_value(info(live), resident[live], d, 0.0, w) > keep_value(
        info(idle), resident[idle], d, 0.0, w
    )


def test_the_cold_floor_is_where_the_expected_cold_requests_reach_the_percentile_rank() -> None:
    # ten requests whose cold floors are 0..9 ms; half of them must be cold
    at_least = [max(0, 10 - x) for x in range(20)]
    # nearest-rank p90 of 10 looks at the 2 largest: 0.5 x (10 - x) >= 2 up to x = 6
    x, expected, sd = cold_percentile_floor(at_least, 0.5, 10, p=90.0)
    assert (x, expected) == (6, 2.0)
    assert sd == pytest.approx((4 * 0.25) ** 0.5)
    assert cold_percentile_chance(at_least, 0.5, 10, 6, p=90.0) < 0.5
    assert cold_percentile_chance(at_least, 0.5, 10, 9, p=90.0) > 0.5
    assert cold_percentile_floor(at_least, 0.0, 10, p=90.0) == (0, 0.0, 0.0)
