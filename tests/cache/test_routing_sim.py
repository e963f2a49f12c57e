"""With several engines the simulator routes as the gateway will: where the version is hottest."""

from __future__ import annotations

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
