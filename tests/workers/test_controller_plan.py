"""The converge plan (workers.controller_plan): pure, so every case is built by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.cache_policy import (
    DemandTracker,
    EngineSnapshot,
    Evict,
    Load,
    Pin,
    Resident,
    Unpin,
    VersionInfo,
    Warm,
    check_plan,
)
from workers.cache_policy.rules import HardRules
from workers.controller import ConvergeReport
from workers.controller_plan import WANT_ON_DEMAND, WANT_PINNED, WANT_WARM, plan_converge
from workers.desired import NO_ROOM_CODES, LoadResult


def info(name: str, tenant: str = "acme", slo: str = "silver", rank: int = 8) -> VersionInfo:
    return VersionInfo(name, tenant, slo, rank, 1000, 0.5)  # type: ignore[arg-type]


def snap(resident: dict[str, Resident], names: list[str], *, gpu=2, cpu=3, quota=1, **kw):
    return EngineSnapshot(
        engine="e",
        now=10_000.0,
        gpu_slots=gpu,
        cpu_slots=cpu,
        max_lora_rank=32,
        resident=resident,
        versions={n: info(n) for n in names},
        tenant_pin_quota={"acme": quota},
        **kw,
    )


def res(name: str, tier: str = "cpu", **kw) -> Resident:
    return Resident(name, tier, **kw)  # type: ignore[arg-type]


def kinds(plan) -> list[tuple[str, str]]:
    return [(type(a).__name__, a.version) for a in plan.actions]


def test_loads_what_is_wanted_and_missing_after_a_restart():
    s = snap({}, ["a", "b"])
    plan = plan_converge(s, DemandTracker(), wanted={"a": WANT_ON_DEMAND, "b": WANT_WARM})
    # Keep-warm before on-demand: the more important wishes are loaded first.
    assert kinds(plan) == [("Load", "b"), ("Load", "a")]


def test_evicts_what_is_not_wanted_but_never_with_requests_in_flight():
    s = snap({"old": res("old"), "busy": res("busy", in_flight=2)}, ["old", "busy"])
    plan = plan_converge(s, DemandTracker(), wanted={})
    assert kinds(plan) == [("Evict", "old")]


def test_a_pinned_unwanted_version_is_unpinned_then_evicted():
    s = snap({"p": res("p", "gpu", pinned=True)}, ["p"])
    assert kinds(plan_converge(s, DemandTracker(), wanted={})) == [("Unpin", "p"), ("Evict", "p")]


def test_full_cache_asks_the_policy_for_a_victim_and_spares_protected_versions():
    demand = DemandTracker()
    for _ in range(50):
        demand.observe("warm", 1.0)
        demand.observe("hot", 1.0)
    s = snap(
        {"warm": res("warm"), "hot": res("hot", "gpu"), "cold": res("cold", "gpu")},
        ["warm", "hot", "cold", "new"],
    )
    wanted = {
        "warm": WANT_WARM,
        "hot": WANT_ON_DEMAND,
        "cold": WANT_ON_DEMAND,
        "new": WANT_ON_DEMAND,
    }
    plan = plan_converge(s, demand, wanted=wanted, incoming="new", auto_pins=False)
    assert ("Evict", "cold") in kinds(plan)
    assert ("Load", "new") in kinds(plan)
    assert plan.evicted_by_policy == ["cold"]
    assert ("Evict", "warm") not in kinds(plan)


def test_no_room_when_everything_is_protected_or_busy_skips_the_load_with_the_rule():
    s = snap(
        {"a": res("a", in_flight=1), "b": res("b", in_flight=1), "c": res("c", "gpu")},
        ["a", "b", "c", "new"],
    )
    wanted = {"a": WANT_ON_DEMAND, "b": WANT_ON_DEMAND, "c": WANT_WARM, "new": WANT_ON_DEMAND}
    plan = plan_converge(s, DemandTracker(), wanted=wanted, auto_pins=False)
    assert ("Load", "new") not in kinds(plan)
    assert [(type(x.action).__name__, x.code) for x in plan.skipped] == [
        ("Load", "implicit-eviction")
    ]


def test_a_refusal_for_room_reaches_the_loads_waiters_as_such():
    """The two ways a load finds no slot (cache full of busy versions, every GPU slot busy) are
    the codes a request may wait out (workers.desired.NO_ROOM_CODES); a failed load is not."""
    full = snap(
        {"a": res("a", in_flight=1), "b": res("b", in_flight=1), "c": res("c", in_flight=1)},
        ["a", "b", "c", "new"],
    )
    gpu_busy = snap(
        {"a": res("a", "gpu", in_flight=1), "b": res("b", "gpu", in_flight=1)},
        ["a", "b", "new"],
    )
    codes = set()
    for s in (full, gpu_busy):
        wanted = {n: WANT_ON_DEMAND for n in s.resident}
        plan = plan_converge(s, DemandTracker(), wanted=wanted, incoming="new", auto_pins=False)
        report = ConvergeReport(
            "e",
            skipped=[
                {
                    "action": "load",
                    "version": x.action.version,
                    "code": x.code,
                    "message": x.message,
                }
                for x in plan.skipped
            ],
        )
        code, reason = report.load_failure("new")
        assert reason and LoadResult(False, True, 1.0, reason, code).no_room
        codes.add(code)
    assert codes == NO_ROOM_CODES  # both rules' codes, one from each case
    failed = ConvergeReport("e", actions=[{"version": "new", "ok": False, "error": "bad file"}])
    assert failed.load_failure("new") == ("load-failed", "bad file")
    assert ConvergeReport("e").load_failure("new") == ("not-loaded", "not loaded")
    assert not LoadResult(False, True, 1.0, "bad file", "load-failed").no_room
    assert not LoadResult(True, True, 1.0).no_room


def test_explicit_pin_is_pinned_and_a_second_is_refused_by_the_last_free_slot_rule():
    s = snap({"a": res("a", "gpu"), "b": res("b", "gpu")}, ["a", "b"], quota=5)
    plan = plan_converge(
        s, DemandTracker(), wanted={"a": WANT_PINNED, "b": WANT_PINNED}, auto_pins=False
    )
    assert kinds(plan) == [("Pin", "a")]
    assert plan.skipped[0].code in {"too-many-pins", "pins-starve-requests"}


def test_pin_beyond_the_tenant_quota_is_refused():
    s = snap({"a": res("a", "gpu")}, ["a"], gpu=4, cpu=6, quota=0)
    plan = plan_converge(s, DemandTracker(), wanted={"a": WANT_PINNED}, auto_pins=False)
    assert kinds(plan) == []
    assert plan.skipped[0].code == "pin-quota"


def test_keep_warm_on_cpu_is_warmed():
    s = snap({"a": res("a", "cpu"), "x": res("x", "gpu"), "y": res("y", "gpu")}, ["a", "x", "y"])
    plan = plan_converge(
        s,
        DemandTracker(),
        wanted={"a": WANT_WARM, "x": WANT_ON_DEMAND, "y": WANT_ON_DEMAND},
        auto_pins=False,
    )
    assert kinds(plan) == [("Warm", "a")]


def test_draining_sheds_everything_idle_and_loads_nothing():
    s = snap({"a": res("a"), "b": res("b", in_flight=1)}, ["a", "b", "c"])
    plan = plan_converge(
        s,
        DemandTracker(),
        wanted={"a": WANT_ON_DEMAND, "c": WANT_ON_DEMAND},
        incoming="c",
        draining=True,
    )
    assert kinds(plan) == [("Evict", "a")]


def test_policy_pins_never_undo_an_explicit_pin():
    demand = DemandTracker()
    for _ in range(100):
        demand.observe("b", 1.0)
    s = snap({"a": res("a", "gpu", pinned=True), "b": res("b", "gpu")}, ["a", "b"], gpu=3, cpu=4)
    plan = plan_converge(s, demand, wanted={"a": WANT_PINNED, "b": WANT_ON_DEMAND})
    assert ("Unpin", "a") not in kinds(plan)


ACTIONS = st.sampled_from(["registered", "resident_gpu", "pinned"])


@settings(max_examples=300, deadline=None)
@given(
    resident=st.dictionaries(
        st.sampled_from("abcdefg"),
        st.tuples(st.booleans(), st.booleans(), st.integers(0, 2)),
        max_size=5,
    ),
    wanted=st.dictionaries(st.sampled_from("abcdefgh"), ACTIONS, max_size=8),
    incoming=st.none() | st.sampled_from("abcdefgh"),
    gpu=st.integers(1, 3),
    extra_cpu=st.integers(0, 3),
    quota=st.integers(0, 3),
    draining=st.booleans(),
)
def test_no_plan_ever_breaks_a_hard_rule(
    resident, wanted, incoming, gpu, extra_cpu, quota, draining
):
    cpu = gpu + extra_cpu
    items = list(resident.items())[:cpu]
    on_gpu = 0
    state = {}
    for name, (want_gpu, pinned, in_flight) in items:
        tier = "gpu" if (want_gpu or pinned) and on_gpu < gpu else "cpu"
        on_gpu += tier == "gpu"
        state[name] = res(name, tier, pinned=pinned and tier == "gpu", in_flight=in_flight)
    pins = [n for n, r in state.items() if r.pinned]
    for n in pins[max(0, min(gpu, cpu) - 1) :]:
        state[n] = res(n, state[n].tier, in_flight=state[n].in_flight)
    s = snap(state, list("abcdefgh"), gpu=gpu, cpu=cpu, quota=quota)
    if check_plan(s, [], HardRules()):
        return  # the engine's own state already breaks a rule: nothing to plan from
    plan = plan_converge(s, DemandTracker(), wanted=wanted, incoming=incoming, draining=draining)
    assert check_plan(s, plan.actions, HardRules()) == []
    for action in plan.actions:
        if isinstance(action, Evict):
            assert state.get(action.version) is None or state[action.version].in_flight == 0
        if isinstance(action, Load | Warm | Pin):
            assert not draining
        if isinstance(action, Unpin):
            assert wanted.get(action.version) != WANT_PINNED or draining


@pytest.mark.parametrize("n", [0, 1])
def test_unknown_version_is_skipped_not_loaded(n):
    s = snap({}, [])
    plan = plan_converge(
        s, DemandTracker(), wanted={"ghost": WANT_ON_DEMAND} if n else {}, incoming="ghost"
    )
    assert kinds(plan) == []
    assert plan.skipped[0].code == "unknown-version"


def test_a_request_gets_a_slot_even_when_every_cached_version_is_wished_pinned():
    s = snap(
        {"a": res("a", "gpu", pinned=True), "b": res("b", "gpu"), "c": res("c")},
        ["a", "b", "c", "d"],
        quota=5,
    )
    wanted = {n: WANT_PINNED for n in "abcd"}
    plan = plan_converge(s, DemandTracker(), wanted=wanted, incoming="d", auto_pins=False)
    assert ("Load", "d") in kinds(plan)
    assert ("Evict", "a") not in kinds(plan)  # the real pin stays


def test_more_wishes_than_slots_do_not_churn_the_cache():
    s = snap({"a": res("a", "gpu"), "b": res("b", "gpu"), "c": res("c")}, list("abcdef"))
    wanted = {n: WANT_ON_DEMAND for n in "abcdef"}
    plan = plan_converge(s, DemandTracker(), wanted=wanted, auto_pins=False)
    assert [k for k, _ in kinds(plan)] == []
    assert {x.code for x in plan.skipped} == {"implicit-eviction"}


def _moving_pin_world(placed_ago_s: float):
    """`a` pinned, `b` now far busier, room for one pin: the policy moves the pin a -> b."""
    demand = DemandTracker()
    demand.observe("a", 1.0)
    for _ in range(200):
        demand.observe("b", 1.0)
    s = snap({"a": res("a", "gpu", pinned=True), "b": res("b", "gpu")}, ["a", "b"], quota=2)
    wanted = {"a": WANT_ON_DEMAND, "b": WANT_ON_DEMAND}
    return s, demand, wanted, {"a": s.now - placed_ago_s}


def test_a_pin_is_not_moved_within_its_minimum_hold():
    """Under load the policy once moved a pin about once a second."""
    s, demand, wanted, pinned_at = _moving_pin_world(placed_ago_s=40.0)
    assert kinds(plan_converge(s, demand, wanted=wanted, pinned_at=pinned_at)) == [
        ("Unpin", "a"),
        ("Pin", "b"),
    ]  # without a hold (the default): moved
    plan = plan_converge(s, demand, wanted=wanted, pinned_at=pinned_at, pin_min_hold_s=30.0)
    assert kinds(plan) == [("Unpin", "a"), ("Pin", "b")]  # placed 40 s ago: past its hold
    s, demand, wanted, pinned_at = _moving_pin_world(placed_ago_s=5.0)
    plan = plan_converge(s, demand, wanted=wanted, pinned_at=pinned_at, pin_min_hold_s=30.0)
    assert kinds(plan) == []  # neither given up nor replaced
    assert {(type(k.action).__name__, k.code) for k in plan.skipped} == {
        ("Unpin", "pin-hold"),
        ("Pin", "pin-hold"),
    }


def test_a_held_pin_of_a_version_no_longer_wanted_goes_at_once():
    s, demand, _, pinned_at = _moving_pin_world(placed_ago_s=1.0)
    plan = plan_converge(
        s, demand, wanted={"b": WANT_ON_DEMAND}, pinned_at=pinned_at, pin_min_hold_s=30.0
    )
    assert kinds(plan)[:2] == [("Unpin", "a"), ("Evict", "a")]  # disabled, unreleased, moved
