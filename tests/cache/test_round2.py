"""The cache policy's second goal set (`make bench-cache2`): structured traces, fleet routers,
references and bounds, derived protection, schedules through the controller's converge pass, and
the report on a tiny run."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bench.cachesim import structured as st
from bench.cachesim.engine import EngineModel
from bench.cachesim.policies import make_policy
from bench.cachesim.policies.portal import Portal
from bench.cachesim.policies.scheduled import PortalScheduled
from bench.cachesim.references import PinOracle, online_miss_bound, popularity
from bench.cachesim.round2 import run_round2
from bench.cachesim.round2_report import render
from bench.cachesim.routers import ResidencyFirst, RoundRobin
from bench.cachesim.sim import CostModel, SimConfig, Simulation
from bench.cachesim.trace import TraceSpec
from tests.cache.helpers import req, trace_of
from workers.cache_policy.fairness import FairnessGovernor, ShadowLru

SMALL = st.Common(requests=2000, seed=4)


def test_sessions_are_runs_of_one_adapter_seconds_apart() -> None:
    trace, windows = st.sessions(st.SessionSpec(common=SMALL))
    assert len(trace) == 2000 and windows == {}
    assert [r.t for r in trace] == sorted(r.t for r in trace)
    # consecutive requests of one adapter come back within the think time far more often than
    # independent draws would bring them
    last: dict[str, float] = {}
    soon = 0
    for r in trace:
        if r.adapter in last and r.t - last[r.adapter] <= 20.0:
            soon += 1
        last[r.adapter] = r.t
    assert soon / len(trace) > 0.6
    # a session is 1 + geometric turns with mean 4: about a quarter of the requests open one
    starts = st.session_starts(st.SessionSpec(common=SMALL))
    assert starts == pytest.approx(len(trace) / 4, rel=0.15)


def test_business_hours_traffic_stays_inside_each_zones_window() -> None:
    spec = st.BusinessHoursSpec(common=st.Common(adapters=96, requests=3000, seed=2))
    trace, windows = st.business_hours(spec)
    per_zone = (96 - spec.always_on) // spec.zones
    assert len(windows) == spec.zones * spec.scheduled
    for r in trace:
        zone = int(r.tenant.removeprefix("bronze"))
        if zone == spec.zones:
            continue  # always on
        start = zone * spec.day_s / spec.zones
        assert (r.t % spec.day_s - start) % spec.day_s < spec.open_fraction * spec.day_s
        assert zone * per_zone <= int(r.adapter[-3:]) < (zone + 1) * per_zone
    # the scheduled ones are each zone's most requested
    counts = Counter(r.adapter for r in trace)
    top = {a for a, _ in counts.most_common(spec.zones * 4)}
    assert len(top & set(windows)) >= spec.zones * 2


def test_a_launched_adapter_has_no_traffic_before_its_release_then_becomes_hot() -> None:
    trace, windows = st.launch(st.LaunchSpec(common=SMALL))
    new, spans = next(iter(windows.items()))
    released = spans[0][0]
    assert spans[0][1] == math.inf
    assert all(r.t >= released for r in trace if r.adapter == new)
    late = [r for r in trace if r.t > released + 300.0]
    assert sum(r.adapter == new for r in late) / len(late) == pytest.approx(0.15, abs=0.04)


def test_round_robin_cycles_and_residency_first_goes_where_the_version_is() -> None:
    engines = [EngineModel(f"engine{i}", 1, 2) for i in range(3)]
    views = [(e, 0, 4) for e in engines]
    rr = RoundRobin()
    assert [rr.choose("A", views) for _ in range(4)] == [0, 1, 2, 0]
    engines[2].activate("A", 0.0)
    engines[1].activate("A", 0.0)
    rf = ResidencyFirst()
    busy = [(engines[0], 0, 4), (engines[1], 3, 4), (engines[2], 1, 4)]
    assert rf.choose("A", busy) == 2  # resident on 1 and 2: the less loaded
    assert rf.choose("B", busy) == 0  # resident nowhere: the least loaded


def test_the_simulator_counts_the_adapters_each_engine_served() -> None:
    sim = Simulation(
        trace_of(list("ABCABC")),
        make_policy("lru"),
        SimConfig(1, 1, engines=3, router="round-robin"),
    )
    sim.run()
    assert [len(s) for s in sim.served] == [1, 1, 1]  # A, B, C, A, B, C: each on one engine
    with pytest.raises(ValueError, match="unknown router"):
        Simulation(trace_of("A"), make_policy("lru"), SimConfig(1, 1, engines=2, router="x"))


def test_pin_oracle_pins_the_most_requested_under_the_hard_rules_and_is_never_refused() -> None:
    names = list("AAAAABBBBCCCDDE" * 20)
    sim = Simulation(trace_of(names), PinOracle(), SimConfig(3, 4, sequential=True))
    m = sim.run()
    assert m.refused == {}
    assert sim.engines[0].model.pinned == {"A", "B"}  # 3 GPU slots: one stays unpinned
    assert (
        m.total.gpu_loads
        < Simulation(trace_of(names), make_policy("lru"), SimConfig(3, 4, sequential=True))
        .run()
        .total.gpu_loads
    )


def test_the_online_bound_is_the_mass_outside_the_top_slots() -> None:
    uniform = TraceSpec(adapters=64, requests=20_000, popularity="uniform")
    bound, sd = online_miss_bound(uniform, 32)
    assert bound == pytest.approx(10_000) and sd == pytest.approx(math.sqrt(20_000 * 0.25))
    for kind in ("zipf", "power", "uniform"):
        p = popularity(TraceSpec(adapters=50, popularity=kind))
        assert p.sum() == pytest.approx(1.0) and list(p) == sorted(p, reverse=True)


def test_the_shadow_lru_counts_what_vllm_lru_would_load() -> None:
    lru = ShadowLru(2)
    misses = [lru.miss(v) for v in "ABABCAB"]
    # C pushes out A (least recent), then A pushes out B, then B pushes out C
    assert misses == [True, True, False, False, True, True, True]
    lru.resize(1)  # an engine left the pool: the least recent entries go
    assert lru.miss("B") is False and lru.miss("A") is True


def _cycle(g: FairnessGovernor, rounds: int, *, gold_loads: bool) -> None:
    """Rounds over 6 versions, 2 gold, that an LRU of 4 slots always misses (the cycle is
    longer than it): LRU loads at every request; bronze never loads here."""
    for _ in range(rounds):
        for i in range(6):
            slo = "gold" if i < 2 else "bronze"
            g.observe(f"v{i}", slo, gold_loads if slo == "gold" else False)


def test_the_governor_raises_gold_protection_until_another_class_pays() -> None:
    g = FairnessGovernor(4)
    start = g.boost
    _cycle(g, 100, gold_loads=True)  # gold loads as often as LRU would, bronze never
    assert g.error() > 0 and g.tick() > start
    raised = g.boost
    # Now three bronze versions that fit in LRU's 4 slots keep being loaded: bronze pays.
    for i in range(600):
        g.observe(f"b{i % 3}", "bronze", True)
    assert g.error() < 0 and g.tick() < raised


def test_the_governor_holds_when_gold_is_within_its_target() -> None:
    g = FairnessGovernor(4)
    _cycle(g, 100, gold_loads=False)  # gold never loads: far below LRU's
    assert g.error() == 0.0 and g.tick() == g.boost == 2.0


def test_requests_that_only_wait_on_a_load_are_not_cold_loads_for_the_governor() -> None:
    """While A loads, 25 requests for B queue behind it: one load of B serves them all, and
    the simulator's portal counts one cold load for B, as the gateway marks only the request
    that started it."""
    trace = [req("A", 0.0)] + [req("B", 0.0001 * (i + 1)) for i in range(25)]
    portal = Portal()
    Simulation(trace, portal, SimConfig(2, 4)).run()
    measured = portal.governor.measured("bronze")
    assert measured is not None
    loads, lru_loads = measured
    # Two loads (decayed a little since), not 26: A and B were loaded once each, as LRU would.
    assert loads == pytest.approx(lru_loads) and 1.5 < loads < 2.0


def test_a_scheduled_window_preloads_so_the_first_request_is_not_cold() -> None:
    trace = [req("A", 0.0), req("B", 100.0)]
    config = SimConfig(2, 3, cost=CostModel(prestaged=True))
    lru = Simulation(trace, make_policy("lru"), config).run()
    sched = Simulation(trace, PortalScheduled({"B": [(90.0, 200.0)]}, lead_s=20.0), config).run()
    assert lru.outcomes == ["cold", "cold"]
    assert sched.outcomes[1] != "cold"  # loaded by the window's keep-warm wish at 70 s
    assert sched.refused == {}


def test_the_report_renders_every_goal_from_a_tiny_run(tmp_path: Path) -> None:
    r = run_round2(seeds=(1,), requests=150, sequential_requests=150, workers=1)
    r["wall_s"] = 1.0
    text = render(r)
    for goal in ("1. Against", "2. Fairness", "3. The GPU", "4. Traffic", "5. Across", "6. Over"):
        assert f"| {goal}" in text and f"### {goal}" in text
    assert text.startswith("<!-- cachesim-round2:begin -->")
    # fleet-8x has more adapters than the fleet's slots: its p99 cold floor is in the table
    assert "| fleet-8x |" in text and "cold floor p99 (any engine choice)" in text


def test_the_business_hours_bound_follows_the_zones_open() -> None:
    from bench.cachesim.round2 import _changing_bound

    spec = st.BusinessHoursSpec(common=st.Common(adapters=96, requests=3000, seed=2))
    trace, _ = st.business_hours(spec)
    for r in trace[::97]:
        shares = st.business_shares(spec, r.t)
        open_zones = st._open_zones(spec, r.t)
        assert len(shares) == spec.always_on + 29 * len(open_zones)
        assert shares.sum() == pytest.approx(1.0) and list(shares) == sorted(shares, reverse=True)
        # the generator only draws adapters of an open zone, or an always-on one
        zone = int(r.adapter[len("bronze")])
        assert zone == spec.zones or zone in open_zones
    # with every slot to spare nothing must miss; with uniform shares it is n (1 - C / N)
    assert _changing_bound(trace, lambda t: np.full(10, 0.1), 10) == (pytest.approx(0.0), 0.0)
    expected, _ = _changing_bound(trace, lambda t: np.full(10, 0.1), 4)
    assert expected == pytest.approx(len(trace) * 0.6)
