"""Goal 4's sessions analysis (bench.cachesim.sessions_floor): it replays the generator's own
sessions, and its bound and estimate order as they must."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from bench.cachesim import structured as st
from bench.cachesim.sessions_floor import (
    CONFIG,
    KEEP_S,
    _Learns,
    _PermPosterior,
    floors,
    render,
    turns,
)
from bench.cachesim.sim import Simulation


def spec(seed: int, requests: int = 600) -> st.SessionSpec:
    return st.SessionSpec(common=replace(st.Common(requests=requests), seed=seed))


def test_it_replays_the_generators_sessions() -> None:
    s = spec(4)
    events, share = turns(s)
    trace, _ = st.sessions(s)
    assert [round(e.t, 6) for e in events] == [r.t for r in trace]
    assert [f"bronze0--a{e.adapter:03d}" for e in events] == [r.adapter for r in trace]
    assert sum(e.first for e in events) == st.session_starts(s)
    assert abs(share.sum() - 1.0) < 1e-9
    # every session's turns are its own adapter, in time order, the first one first
    by_session: dict[int, list] = {}
    for e in events:
        by_session.setdefault(e.session, []).append(e)
    for turns_of in by_session.values():
        assert turns_of[0].first and not any(e.first for e in turns_of[1:])
        assert len({e.adapter for e in turns_of}) == 1


def test_learning_the_popularity_costs_more_than_knowing_it() -> None:
    f = floors(spec(2), dt=0.2)
    assert 0.0 < f["known"] < f["learnt"]
    assert f["known"] < f["learnt-perm"]
    assert floors(spec(2), dt=0.2)["learnt-perm"] == f["learnt-perm"]  # its MCMC is seeded


def exact_posterior_mean(atoms: np.ndarray, counts: list[int]) -> np.ndarray:
    """E[atom[pi(v)] | counts] with pi uniform over permutations, by enumerating them all."""
    total, norm = np.zeros(len(atoms)), 0.0
    for pi in itertools.permutations(range(len(atoms))):
        shares = atoms[list(pi)]
        weight = float(np.prod(shares ** np.array(counts)))
        total += weight * shares
        norm += weight
    return total / norm


def test_the_permutation_posterior_is_the_exact_one() -> None:
    """On catalogs small enough to enumerate every permutation (4 and 5 adapters, ties in
    the counts included), the chains' posterior mean is the exact one; and the independent
    prior's answer, which the generator's permutation makes wrong, is not."""
    for k, counts in ((4, [3, 0, 1, 5]), (5, [4, 0, 1, 1, 0])):
        w = 1.0 / np.arange(1, k + 1)
        atoms = w / w.sum()
        exact = exact_posterior_mean(atoms, counts)
        posterior = _PermPosterior(atoms, chains=4000, swaps=40, rng=np.random.default_rng(3))
        for adapter in np.random.default_rng(4).permutation(np.repeat(np.arange(k), counts)):
            posterior.observe(int(adapter))
        assert np.abs(posterior.mean() - exact).max() < 0.01
        assert abs(posterior.mean().sum() - 1.0) < 1e-9
        n = np.array(counts)
        ll = n[:, None] * np.log(atoms)[None, :] - n.sum() * atoms[None, :]
        independent = np.exp(ll - ll.max(axis=1, keepdims=True))
        independent = (independent / independent.sum(axis=1, keepdims=True)) @ atoms
        assert np.abs(independent / independent.sum() - exact).max() > 0.03


def test_the_section_states_the_goal_and_every_column() -> None:
    row = {"known": 180.0, "learnt": 220.0, "learnt-perm": 218.0, "lru": 300.0, "a0": 290.0}
    row["portal"] = 280.0
    row |= {"oracle-pop": 210.0, "counted-pop": 240.0, "learns": 235.0, "learns-filled": 233.0}
    text = render({1: row}, "make bench-sessions-floor")
    assert text.startswith("<!-- cachesim-sessions-floor:begin -->")
    assert "at most 232" in text  # 0.8 x the better of lru and a0
    assert (
        "| mean | 180.0 | 220.0 | 218.0 | 300.0 | 290.0 | 280.0 | 210.0 | 240.0 | 235.0 | 233.0 |"
        in text
    )
    assert "the popularity is 218.0 (within the goal)" in text
    assert "`learns-filled` 233 (above the goal)" in text
    row["learns-filled"] = 231.0
    assert "(within the goal)" in render({1: row}, "make bench-sessions-floor")
    row["learnt-perm"] = 233.0
    assert "the popularity is 233.0 (above the goal)" in render(
        {1: row}, "make bench-sessions-floor"
    )


def test_learns_counts_each_session_once() -> None:
    """A visit is a request with none for its version in the last KEEP_S: every later turn
    comes within KEEP_S of its session's previous one, so only first turns count, and those
    whose adapter was quiet for KEEP_S."""
    s = spec(5)
    events, _ = turns(s)
    trace, _ = st.sessions(s)
    policy = _Learns(fill=False)
    Simulation(trace, policy, CONFIG).run()
    last: dict[int, float] = {}
    expected: dict[str, int] = {}
    for e in events:
        if e.t - last.get(e.adapter, -1e18) > KEEP_S:
            assert e.first  # the generator's think times are at most KEEP_S
            name = f"bronze0--a{e.adapter:03d}"
            expected[name] = expected.get(name, 0) + 1
        last[e.adapter] = e.t
    assert policy.visits == expected
    assert sum(expected.values()) < len(events)  # sessions, not turns
