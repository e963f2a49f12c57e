"""`belady` reaches the true minimum of cold loads and GPU loads in sequential mode."""

from __future__ import annotations

from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cachesim.policies import POLICIES, make_policy
from bench.cachesim.sim import SimConfig, simulate
from tests.cache.helpers import trace_of


def brute_force_min_misses(names: tuple[str, ...], capacity: int) -> int:
    """Fewest misses of any demand-paging cache of `capacity` entries, by trying every victim."""

    @cache
    def best(i: int, cache: frozenset[str]) -> int:
        if i == len(names):
            return 0
        a = names[i]
        if a in cache:
            return best(i + 1, cache)
        if len(cache) < capacity:
            return 1 + best(i + 1, cache | {a})
        return 1 + min(best(i + 1, (cache - {v}) | {a}) for v in cache)

    return best(0, frozenset())


def run(policy: str, names: list[str], gpu: int, cpu: int):
    return simulate(trace_of(names), make_policy(policy), SimConfig(gpu, cpu, sequential=True))


def test_it_keeps_the_one_needed_soonest() -> None:
    # cpu 2: A B C A B. At C, A comes back before B, so B goes: A hits, B misses. LRU misses both.
    assert run("belady", list("ABCAB"), 1, 2).total.cold_loads == 4
    assert run("lru", list("ABCAB"), 1, 2).total.cold_loads == 5


@settings(max_examples=120, deadline=None)
@given(
    names=st.lists(st.sampled_from("ABCDE"), min_size=1, max_size=14),
    gpu=st.integers(1, 2),
    extra=st.integers(0, 2),
)
def test_it_reaches_the_brute_force_minimum_at_both_tiers(
    names: list[str], gpu: int, extra: int
) -> None:
    cpu = gpu + extra
    m = run("belady", names, gpu, cpu)
    assert m.total.cold_loads == brute_force_min_misses(tuple(names), cpu)
    assert m.total.gpu_loads == brute_force_min_misses(tuple(names), gpu)


@settings(max_examples=40, deadline=None)
@given(names=st.lists(st.sampled_from("ABCDEFGH"), min_size=1, max_size=80))
def test_no_policy_beats_it_in_sequential_mode(names: list[str]) -> None:
    opt = run("belady", names, 2, 4)
    for policy in POLICIES:
        m = run(policy, names, 2, 4)
        assert m.total.cold_loads >= opt.total.cold_loads, policy
        assert m.total.gpu_loads >= opt.total.gpu_loads, policy
