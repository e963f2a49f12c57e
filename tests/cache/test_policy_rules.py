"""Property tests: whatever the engine state and history, a plan never breaks a hard rule."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from workers.cache_policy import (
    DemandTracker,
    EngineSnapshot,
    Evict,
    HardRules,
    Load,
    Pin,
    PolicyParams,
    Resident,
    Unpin,
    VersionInfo,
    Warm,
    check_plan,
    plan_actions,
)

RULES = HardRules(gold_min_residency_s=300.0)
NAMES = [f"v{i}" for i in range(10)]


@st.composite
def situations(draw: st.DrawFn) -> tuple[EngineSnapshot, DemandTracker, str | None, PolicyParams]:
    gpu = draw(st.integers(1, 4))
    cpu = gpu + draw(st.integers(0, 4))
    now = 10_000.0
    versions = {
        n: VersionInfo(
            n,
            tenant=draw(st.sampled_from(["t0", "t1", "t2"])),
            slo=draw(st.sampled_from(["gold", "silver", "bronze"])),
            rank=draw(st.sampled_from([8, 16, 32, 64, 128])),
            size_bytes=draw(st.integers(1, 10**9)),
            load_cost_s=draw(st.floats(0.001, 5.0)),
        )
        for n in NAMES
    }
    cached = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=cpu))
    on_gpu = cached[: draw(st.integers(0, min(gpu, len(cached))))]
    resident = {}
    for n in cached:
        gpu_here = n in on_gpu
        resident[n] = Resident(
            n,
            "gpu" if gpu_here else "cpu",
            # Pinned versions are on the GPU, as in vLLM; the pins may break the rules already
            # (a quota lowered since), which the plan must repair.
            pinned=gpu_here and draw(st.booleans()),
            # Running requests hold a GPU slot; queued ones may wait for a version in the cache.
            in_flight=draw(st.sampled_from([0, 0, 0, 1, 2])),
            loaded_at=now - draw(st.floats(0, 1000)),
            last_used=now - draw(st.floats(0, 1000)),
        )
    snap = EngineSnapshot(
        engine="e",
        now=now,
        gpu_slots=gpu,
        cpu_slots=cpu,
        max_lora_rank=draw(st.sampled_from([16, 64, 128])),
        resident=resident,
        versions=versions,
        tenant_pin_quota={t: draw(st.integers(0, 3)) for t in ["t0", "t1"]},  # t2: no quota
        pinned_rank_budget=draw(st.none() | st.integers(0, 256)),
        busy_peak=draw(st.sampled_from([0, 0, 1, 2])),
    )
    demand = DemandTracker()
    history = draw(st.lists(st.sampled_from(NAMES), max_size=60)) * draw(st.integers(1, 20))
    for i, n in enumerate(history):
        demand.observe(n, now - len(history) + i)
    incoming = draw(st.none() | st.sampled_from(NAMES))
    params = PolicyParams(
        rules=RULES,
        gpu_spare_slots=draw(st.integers(0, 2)),
        pin_min_share=draw(st.sampled_from([0.0, 0.001, 0.01])),
        prefetch_min_share=draw(st.none() | st.floats(0.0, 0.5)),
    )
    return snap, demand, incoming, params


@dataclass
class _V:
    tier: str
    pinned: bool
    in_flight: int
    loaded_at: float


def broken_rules(snap: EngineSnapshot, actions: list) -> list[str]:
    """An independent replay of the plan on vLLM's two caches, listing every rule broken."""
    s = {n: _V(r.tier, r.pinned, r.in_flight, r.loaded_at) for n, r in snap.resident.items()}
    out: list[str] = []

    def gpu_slot_for(n: str) -> bool:
        others = [m for m, v in s.items() if v.tier == "gpu" and m != n]
        if len(others) < snap.gpu_slots:
            return True
        idle = [m for m in others if not s[m].pinned and s[m].in_flight == 0]
        if not idle:
            out.append(f"activation of {n} would demote a pinned or busy version")
            return False
        s[idle[0]].tier = "cpu"
        return True

    for a in actions:
        n, info = a.version, snap.versions[a.version]
        if isinstance(a, Evict):
            v = s.get(n)
            if v is None or v.in_flight or v.pinned:
                out.append(f"evict {n}: absent, busy or pinned")
            elif info.slo == "gold" and snap.now - v.loaded_at < RULES.gold_min_residency_s:
                out.append(f"evict {n}: gold under its minimum residency")
            else:
                del s[n]
            continue
        if isinstance(a, Unpin):
            if n not in s or not s[n].pinned:
                out.append(f"unpin {n}: not pinned")
            else:
                s[n].pinned = False
            continue
        if info.rank > snap.max_lora_rank:
            out.append(f"{a}: rank above the engine's max")
        if isinstance(a, Load):
            if n in s or len(s) >= snap.cpu_slots:
                out.append(f"load {n}: resident already or would make vLLM's LRU evict")
                continue
            s[n] = _V("cpu", False, 0, snap.now)
        elif n not in s:
            out.append(f"{a}: not resident")
            continue
        if s[n].tier != "gpu" and gpu_slot_for(n):
            s[n].tier = "gpu"
        if isinstance(a, Pin):
            s[n].pinned = True
    pinned = [n for n, v in s.items() if v.pinned]
    if len(pinned) > min(snap.gpu_slots, snap.cpu_slots) - 1:
        out.append(f"{len(pinned)} pinned leaves no unpinned GPU or cache slot")
    for tenant in {snap.versions[n].tenant for n in pinned}:
        held = sum(1 for n in pinned if snap.versions[n].tenant == tenant)
        if held > snap.tenant_pin_quota.get(tenant, 0):
            out.append(f"tenant {tenant} holds {held} pins over its quota")
    needy = sum(1 for v in s.values() if v.in_flight and not v.pinned)
    idle_pinned = [n for n in pinned if not s[n].in_flight]
    if idle_pinned and len(pinned) > snap.gpu_slots - max(1, needy):
        out.append("an idle pin holds a GPU slot that requests in flight need")
    rank = sum(snap.versions[n].rank for n in pinned)
    if snap.pinned_rank_budget is not None and rank > snap.pinned_rank_budget:
        out.append(f"pinned rank {rank} over the budget")
    if any(v.pinned and v.tier != "gpu" for v in s.values()):
        out.append("a pinned version lost its GPU slot")
    return out


@settings(max_examples=300, deadline=None)
@given(situations())
def test_a_plan_never_breaks_a_hard_rule(
    situation: tuple[EngineSnapshot, DemandTracker, str | None, PolicyParams],
) -> None:
    snap, demand, incoming, params = situation
    actions = plan_actions(snap, demand, incoming=incoming, params=params)
    assert broken_rules(snap, actions) == []
    assert check_plan(snap, actions, RULES) == []


@settings(max_examples=150, deadline=None)
@given(situations())
def test_a_request_never_leaves_the_victim_to_vllm_when_one_may_go(
    situation: tuple[EngineSnapshot, DemandTracker, str | None, PolicyParams],
) -> None:
    snap, demand, incoming, params = situation
    if incoming is None or incoming in snap.resident or len(snap.resident) < snap.cpu_slots:
        return
    actions = plan_actions(snap, demand, incoming=incoming, params=params)
    unpinned = {a.version for a in actions if isinstance(a, Unpin)}
    may_go = [
        n
        for n, r in snap.resident.items()
        if not r.in_flight
        and (not r.pinned or n in unpinned)
        and not (snap.versions[n].slo == "gold" and snap.now - r.loaded_at < 300)
    ]
    evicted = [a.version for a in actions if isinstance(a, Evict)]
    assert len(evicted) == (1 if may_go else 0)


def test_the_checker_sees_each_broken_rule() -> None:
    """The checker itself must be able to fail, one rule at a time."""
    info = {
        "g": VersionInfo("g", "t0", "gold", 16, 1, 0.1),
        "b": VersionInfo("b", "t0", "bronze", 16, 1, 0.1),
        "big": VersionInfo("big", "t1", "bronze", 128, 1, 0.1),
        "c": VersionInfo("c", "t1", "bronze", 16, 1, 0.1),
    }
    snap = EngineSnapshot(
        "e",
        now=1000.0,
        gpu_slots=2,
        cpu_slots=2,
        max_lora_rank=64,
        resident={
            "g": Resident("g", "gpu", loaded_at=900.0),
            "b": Resident("b", "gpu", in_flight=1),
        },
        versions=info,
        tenant_pin_quota={"t0": 1},
    )
    codes = {v.code for v in check_plan(snap, [Evict("b")], RULES)}
    assert codes == {"evict-in-flight"}
    assert {v.code for v in check_plan(snap, [Evict("g")], RULES)} == {"gold-min-residency"}
    assert {v.code for v in check_plan(snap, [Load("c")], RULES)} == {"implicit-eviction"}
    assert {v.code for v in check_plan(snap, [Warm("big")], RULES)} == {"rank-too-large"}
    assert {v.code for v in check_plan(snap, [Pin("g"), Pin("b")], RULES)} >= {"too-many-pins"}
    assert {v.code for v in check_plan(snap, [Pin("g")], RULES)} == set()
    over_quota = replace(snap, gpu_slots=3, cpu_slots=3, tenant_pin_quota={"t0": 0})
    assert {v.code for v in check_plan(over_quota, [Pin("g")], RULES)} == {"pin-quota"}
    budget = replace(snap, pinned_rank_budget=8)
    assert {v.code for v in check_plan(budget, [Pin("g")], RULES)} == {"rank-budget"}
    crowded = EngineSnapshot(
        "e",
        now=1000.0,
        gpu_slots=3,
        cpu_slots=5,
        max_lora_rank=64,
        resident={
            "g": Resident("g", "gpu"),
            "b": Resident("b", "gpu", in_flight=1),
            "c": Resident("c", "cpu", in_flight=1),
            "d": Resident("d", "gpu"),
        },
        versions={**info, "d": VersionInfo("d", "t1", "bronze", 16, 1, 0.1)},
        tenant_pin_quota={"t0": 2, "t1": 2},
    )
    # b runs and c waits: both need an unpinned slot, so of three slots only one may be pinned
    assert {v.code for v in check_plan(crowded, [Pin("g")], RULES)} == set()
    starve = {v.code for v in check_plan(crowded, [Pin("g"), Pin("d")], RULES)}
    assert starve == {"pins-starve-requests"}
    assert broken_rules(crowded, [Pin("g"), Pin("d")]) != []
    assert broken_rules(snap, [Evict("b")]) != []
    assert broken_rules(snap, [Pin("g"), Pin("b")]) != []


def _eager_to_pin(
    s: tuple[EngineSnapshot, DemandTracker, str | None, PolicyParams],
) -> tuple[EngineSnapshot, DemandTracker, str | None, PolicyParams]:
    """The same situation with every reason not to pin removed (quotas, budget, load, share),
    so the rule that pins leave slots for requests in flight is what binds."""
    snap, demand, incoming, params = s
    snap = replace(
        snap,
        tenant_pin_quota={"t0": 9, "t1": 9, "t2": 9},
        pinned_rank_budget=None,
        busy_peak=0,
        max_lora_rank=128,
    )
    return snap, demand, incoming, replace(params, pin_min_share=0.0)


@settings(max_examples=200, deadline=None)
@given(situations().map(_eager_to_pin))
def test_pins_always_leave_a_slot_for_each_version_with_requests(
    situation: tuple[EngineSnapshot, DemandTracker, str | None, PolicyParams],
) -> None:
    snap, demand, incoming, params = situation
    actions = plan_actions(snap, demand, incoming=incoming, params=params)
    assert broken_rules(snap, actions) == []
