"""TTFT and transfer accounting on traces small enough to add up by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.cachesim.engine import EngineModel
from bench.cachesim.policies import Controller, make_policy
from bench.cachesim.sim import CostModel, SimConfig, simulate
from bench.cachesim.trace import TraceRequest
from tests.cache.helpers import MIB, req, trace_of
from workers.cache_policy import Action, Evict, Load, Pin, Warm

# Round numbers: 100 MB adapters, 1 GB/s disk, 0.5 GB/s object store, 10 GB/s PCIe.
COST = CostModel(
    disk_bytes_per_s=1e9,
    object_bytes_per_s=5e8,
    pcie_bytes_per_s=1e10,
    load_overhead_s=0.05,
    prefill_tokens_per_s=1000.0,
    decode_step_s=0.01,
)
SIZE = 100_000_000


def one(adapter: str, t: float, prompt: int = 100, output: int = 10) -> TraceRequest:
    return req(adapter, t, size=SIZE, prompt=prompt, output=output)


def test_a_cold_request_waits_for_fetch_load_move_and_prefill() -> None:
    m = simulate([one("A", 0.0)], make_policy("lru"), SimConfig(1, 1, sequential=True, cost=COST))
    # fetch 0.2 s + cold load 0.05 + 0.1 s + move 0.01 s + prefill 100 tokens 0.1 s = 0.46 s
    assert m.total.ttft_s == [pytest.approx(0.46)]
    assert m.object_fetches == 1 and m.object_bytes == SIZE
    # then 10 decode steps of 10 ms
    assert m.makespan_s == pytest.approx(0.56)


def test_second_request_to_a_staged_evicted_adapter_skips_the_fetch() -> None:
    trace = [one("A", 0.0), one("B", 1.0), one("A", 2.0)]
    m = simulate(trace, make_policy("lru"), SimConfig(1, 1, sequential=True, cost=COST))
    # A again: on disk already, evicted from the cache by B: load 0.15 + move 0.01 + prefill 0.1
    assert m.total.ttft_s[2] == pytest.approx(0.26)
    assert m.total.cold_loads == 3 and m.object_fetches == 2


def test_a_gpu_hit_costs_only_prefill() -> None:
    m = simulate([one("A", 0.0), one("A", 5.0)], make_policy("lru"), SimConfig(1, 1, cost=COST))
    assert m.outcomes == ["cold", "gpu"]
    assert m.total.ttft_s[1] == pytest.approx(0.1)


def test_a_load_stalls_requests_already_running() -> None:
    # A runs 0.46 s to first token then 100 decode steps (1 s); B arrives at 0.5 s, cold, on disk
    # only after its fetch (0.2 s): its load (0.15 s) + move (0.01 s) stalls A by 0.16 s.
    cost = replace(COST, prestaged=False)
    trace = [one("A", 0.0, output=100), one("B", 0.5)]
    m = simulate(trace, make_policy("lru"), SimConfig(2, 2, cost=cost))
    assert m.total.ttft_s[1] == pytest.approx(0.2 + 0.16 + 0.1)
    a_finish = 0.46 + 1.0 + 0.16
    b_finish = 0.5 + 0.2 + 0.16 + 0.1 + 0.1
    assert m.makespan_s == pytest.approx(max(a_finish, b_finish))


def test_requests_wait_for_a_gpu_slot_held_by_a_running_adapter() -> None:
    # One GPU slot: B cannot be activated while A runs (vLLM caps distinct adapters per batch).
    cost = replace(COST, prestaged=True)
    trace = [one("A", 0.0, output=100), one("B", 0.1)]
    m = simulate(trace, make_policy("lru"), SimConfig(1, 2, cost=cost))
    a_done = 0.15 + 0.01 + 0.1 + 1.0
    assert m.total.ttft_s[1] == pytest.approx(a_done - 0.1 + 0.15 + 0.01 + 0.1)


class Scripted(Controller):
    """Sends fixed actions on the miss of one adapter, to see what the simulator does with them."""

    name = "scripted"

    def __init__(self, on: str, actions: list[Action]) -> None:
        self.on = on
        self.script = actions

    def on_miss(self, engine: EngineModel, r: TraceRequest, now: float) -> list[Action]:
        return self.script if r.adapter == self.on else []


def test_it_refuses_actions_that_break_the_engine_rules() -> None:
    cost = replace(COST, prestaged=True)
    # A runs long; at B's arrival the controller tries to evict A (in flight), to pin A (with one
    # GPU slot, that leaves none unpinned), to warm a version never loaded and to pin B (not
    # cached yet).
    trace = [one("A", 0.0, output=1000), one("B", 0.5)]
    actions: list[Action] = [Evict("A"), Pin("A"), Warm("C"), Pin("B")]
    m = simulate(trace, Scripted("B", actions), SimConfig(1, 2, cost=cost))
    assert m.refused == {
        "evict-in-flight": 1,
        "pin-leaves-no-unpinned-slot": 1,
        "warm-not-cached": 1,
        "pin-not-cached-or-pinned": 1,
    }


def test_a_controller_load_is_a_cold_load_whoever_asked() -> None:
    cost = replace(COST, prestaged=True)
    trace = [one("A", 0.0), one("B", 10.0)]
    m = simulate(trace, Scripted("A", [Load("B")]), SimConfig(2, 2, sequential=True, cost=cost))
    assert m.controller_loads == 1
    assert m.total.cold_loads == 2  # A by its request, B by the controller
    assert m.outcomes == ["cold", "gpu"]


def test_sizes_are_counted_in_bytes_loaded() -> None:
    trace = [req("A", 0.0, size=8 * MIB), req("B", 1.0, size=64 * MIB)]
    m = simulate(trace, make_policy("lru"), SimConfig(1, 1, sequential=True))
    assert m.total.bytes_loaded == 72 * MIB


def test_per_slo_counts_add_up() -> None:
    trace = [
        replace(r, slo="gold" if r.adapter == "A" else "bronze") for r in trace_of(list("ABCABCAD"))
    ]
    d = simulate(trace, make_policy("lru"), SimConfig(1, 2, sequential=True)).to_dict()
    for key in ("requests", "gpu_hits", "cpu_hits", "cold_loads", "gpu_loads", "bytes_loaded"):
        assert d[key] == sum(s[key] for s in d["by_slo"].values()), key
    assert d["by_slo"]["gold"]["requests"] == 3


class _LoadsItsOwnMiss(Controller):
    """Loads the requested version in its miss handler: the load is the same, so the request
    must still count as cold (it waited for that load)."""

    name = "loads-own-miss"

    def on_miss(self, engine: EngineModel, req: TraceRequest, now: float) -> list[Action]:
        return [] if req.adapter in engine.cpu else [Load(req.adapter, "own miss")]


def test_a_policy_cannot_turn_a_cold_request_into_a_hit_by_loading_it_itself() -> None:
    trace = trace_of("ABAC")
    plain = simulate(trace, make_policy("lru"), SimConfig(1, 2, cost=COST))
    own = simulate(trace, _LoadsItsOwnMiss(), SimConfig(1, 2, cost=COST))
    assert own.controller_loads == 3
    assert own.outcomes == plain.outcomes == ["cold", "cold", "cpu", "cold"]


def test_a_request_that_waited_for_a_load_another_request_started_is_cold() -> None:
    """Two requests for A arrive together: both wait for the one load."""
    trace = [one("A", 0.0), one("A", 0.0), one("A", 5.0)]
    m = simulate(trace, make_policy("lru"), SimConfig(1, 1, cost=COST))
    assert m.outcomes == ["cold", "cold", "gpu"]
    assert m.total.cold_loads == 1
