"""With several engines the simulator routes as the gateway will: where the version is hottest."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cachesim.policies import make_policy
from bench.cachesim.sim import SimConfig, Simulation
from tests.cache.helpers import trace_of


def test_a_version_goes_back_to_the_engine_that_has_it() -> None:
    sim = Simulation(trace_of(list("ABAB")), make_policy("lru"), SimConfig(1, 1, engines=2))
    m = sim.run()
    # A lands on engine0 (tie: least loaded, then name); B on engine1 (free slot); then each
    # returns to the engine holding it, so the second round is all GPU hits.
    assert m.outcomes == ["cold", "cold", "gpu", "gpu"]
    assert list(sim.engines[0].model.cpu) == ["A"]
    assert list(sim.engines[1].model.cpu) == ["B"]


def test_portal_never_has_an_action_refused_on_a_busy_multi_engine_run() -> None:
    names = list("ABCDEFGHABCABADEAFAGAHABCABCDAB" * 6)
    trace = trace_of(names, gap=0.05)  # overlapping requests
    m = Simulation(trace, make_policy("portal"), SimConfig(2, 3, engines=2)).run()
    assert m.refused == {}
    assert m.total.requests == len(names)


@settings(max_examples=40, deadline=None)
@given(
    names=st.lists(st.sampled_from("ABCDEFGHIJ"), min_size=1, max_size=120),
    gap=st.sampled_from([0.01, 0.2, 5.0]),
    gpu=st.integers(1, 3),
    extra=st.integers(0, 3),
    quota=st.integers(0, 3),
)
def test_the_engine_never_refuses_a_portal_action(
    names: list[str], gap: float, gpu: int, extra: int, quota: int
) -> None:
    """Whatever the load, every action portal sends is one the engine model accepts: no evict of
    a busy version, no pin that leaves every slot pinned, no warm or load without room."""
    trace = [
        replace(r, slo="gold" if r.adapter in "AB" else "bronze") for r in trace_of(names, gap)
    ]
    config = SimConfig(gpu, gpu + extra, pin_quota=quota, gold_min_residency_s=30.0)
    m = Simulation(trace, make_policy("portal"), config).run()
    assert m.refused == {}
    assert m.total.requests == len(names)
