"""The `lru` policy (vLLM alone) equals a plain two-level LRU exactly in sequential mode."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cachesim.policies import make_policy
from bench.cachesim.sim import SimConfig, simulate
from tests.cache.helpers import trace_of


def reference_two_level_lru(names: list[str], gpu: int, cpu: int) -> tuple[list[str], int, int]:
    """Written independently of the engine model, from vLLM's behaviour: a GPU LRU inside a CPU
    LRU; a CPU eviction also frees the GPU slot. Returns outcomes, cold loads, GPU loads."""
    cpu_lru: list[str] = []  # least recent first
    gpu_lru: list[str] = []
    outcomes: list[str] = []
    cold = moves = 0
    for a in names:
        if a in gpu_lru:
            outcomes.append("gpu")
        elif a in cpu_lru:
            outcomes.append("cpu")
        else:
            outcomes.append("cold")
            cold += 1
            if len(cpu_lru) == cpu:
                victim = cpu_lru.pop(0)
                if victim in gpu_lru:
                    gpu_lru.remove(victim)
            cpu_lru.append(a)
        if a not in gpu_lru:
            moves += 1
            if len(gpu_lru) == gpu:
                gpu_lru.pop(0)
            gpu_lru.append(a)
        cpu_lru.remove(a)
        cpu_lru.append(a)
        gpu_lru.remove(a)
        gpu_lru.append(a)
    return outcomes, cold, moves


def run_lru(names: list[str], gpu: int, cpu: int):
    return simulate(trace_of(names), make_policy("lru"), SimConfig(gpu, cpu, sequential=True))


def test_it_matches_a_hand_checked_trace() -> None:
    # gpu 1, cpu 2. A: cold. B: cold (cache A,B; GPU B). A: in cache, moved (GPU A).
    # C: cold, cache full -> LRU B leaves (A was touched after B); GPU C.
    # B: cold, cache [A, C] -> A leaves; GPU B.
    m = run_lru(list("ABACB"), gpu=1, cpu=2)
    assert m.outcomes == ["cold", "cold", "cpu", "cold", "cold"]
    d = m.to_dict()
    assert (d["cold_loads"], d["gpu_loads"], d["cpu_hits"], d["gpu_hits"]) == (4, 5, 1, 0)
    assert d["evictions"] == 2
    assert d["bytes_loaded"] == 4 * 32 * 1024 * 1024


def test_a_repeat_is_a_gpu_hit() -> None:
    m = run_lru(list("AAB A".replace(" ", "")), gpu=2, cpu=2)
    assert m.outcomes == ["cold", "gpu", "cold", "gpu"]


@settings(max_examples=200, deadline=None)
@given(
    names=st.lists(st.sampled_from("ABCDEFG"), min_size=1, max_size=60),
    gpu=st.integers(1, 4),
    extra=st.integers(0, 4),
)
def test_it_equals_plain_two_level_lru(names: list[str], gpu: int, extra: int) -> None:
    cpu = gpu + extra
    m = run_lru(names, gpu, cpu)
    outcomes, cold, moves = reference_two_level_lru(names, gpu, cpu)
    assert m.outcomes == outcomes
    assert m.total.cold_loads == cold
    assert m.total.gpu_loads == moves
