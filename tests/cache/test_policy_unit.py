"""The policy's choices on small engines where the right answer is plain."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from workers.cache_policy import (
    DemandParams,
    DemandTracker,
    EngineChoice,
    EngineSnapshot,
    Evict,
    HardRules,
    Pin,
    PolicyParams,
    Resident,
    ScoreWeights,
    Tier,
    Unpin,
    VersionInfo,
    choose_engine,
    plan_actions,
)

NOW = 10_000.0
NO_PRIORITY = PolicyParams(weights=ScoreWeights(priority=0.0, load_cost=0.0))


def info(name: str, slo: str = "bronze", tenant: str = "t0") -> VersionInfo:
    return VersionInfo(name, tenant, slo, 16, 32 * 2**20, 0.07)  # type: ignore[arg-type]


def demand_of(counts: dict[str, int]) -> DemandTracker:
    """Interleaved history: each version's share is its count over the total."""
    d = DemandTracker()
    seq = [n for n, c in counts.items() for _ in range(c)]
    seq = [seq[(i * 7919) % len(seq)] for i in range(len(seq))]  # a fixed shuffle
    for i, n in enumerate(seq):
        d.observe(n, NOW - len(seq) + i)
    return d


def engine(resident: list[Resident], gpu: int, cpu: int, **kw: Any) -> EngineSnapshot:
    names = {r.name for r in resident} | {"new"}
    versions = {n: info(n) for n in names}
    versions.update(kw.pop("versions", {}))
    return EngineSnapshot(
        "e",
        NOW,
        gpu,
        cpu,
        128,
        {r.name: r for r in resident},
        versions,
        tenant_pin_quota=kw.pop("quota", {"t0": 8, "t1": 8}),
        **kw,
    )


def test_it_evicts_the_least_demanded_not_the_least_recent() -> None:
    snap = engine(
        [Resident("hot", "cpu", last_used=1.0), Resident("cold", "gpu", last_used=NOW - 1)],
        gpu=1,
        cpu=2,
    )
    actions = plan_actions(
        snap, demand_of({"hot": 50, "cold": 2}), incoming="new", params=NO_PRIORITY
    )
    assert Evict("cold", "make room for new") in actions


def test_a_slot_promised_to_a_version_on_its_way_in_is_not_free() -> None:
    """One slot is free, but a request already waits for `queued` to load into it: the new
    request's room must be made now, or vLLM's LRU picks the victim when both load."""
    snap = engine(
        [Resident("hot", "cpu", last_used=1.0), Resident("cold", "cpu", last_used=NOW - 1)],
        gpu=1,
        cpu=3,
        versions={"queued": info("queued")},
        arriving=frozenset({"queued"}),
    )
    demand = demand_of({"hot": 50, "cold": 2, "queued": 5})
    actions = plan_actions(snap, demand, incoming="new", params=NO_PRIORITY)
    assert Evict("cold", "make room for new") in actions
    # Without the promise the free slot is the new version's, and nothing is evicted.
    free = replace(snap, arriving=frozenset())
    plan = plan_actions(free, demand, incoming="new", params=NO_PRIORITY)
    assert not [a for a in plan if isinstance(a, Evict)]


def test_it_spares_busy_pinned_and_young_gold_versions() -> None:
    snap = engine(
        [
            Resident("busy", "gpu", in_flight=1),
            Resident("pinned", "gpu", pinned=True),
            Resident("gold", "cpu", loaded_at=NOW - 10),
            Resident("old-gold", "cpu", loaded_at=NOW - 1000),
            Resident("hot", "cpu"),
        ],
        gpu=3,
        cpu=5,
        versions={"gold": info("gold", "gold"), "old-gold": info("old-gold", "gold")},
    )
    d = demand_of({"hot": 50, "busy": 1, "pinned": 1, "gold": 1, "old-gold": 1})
    params = replace(NO_PRIORITY, rules=HardRules(gold_min_residency_s=300))
    evicted = [
        a.version
        for a in plan_actions(snap, d, incoming="new", params=params)
        if isinstance(a, Evict)
    ]
    assert evicted == ["old-gold"]


def test_gold_priority_keeps_a_gold_version_over_a_busier_bronze_one() -> None:
    snap = engine(
        [Resident("gold", "cpu"), Resident("bronze", "cpu")],
        gpu=1,
        cpu=2,
        versions={"gold": info("gold", "gold")},
    )
    d = demand_of({"gold": 10, "bronze": 15})
    params = PolicyParams(rules=HardRules(gold_min_residency_s=0))
    evicted = [
        a.version
        for a in plan_actions(snap, d, incoming="new", params=params)
        if isinstance(a, Evict)
    ]
    assert evicted == ["bronze"]
    evicted = [
        a.version
        for a in plan_actions(snap, d, incoming="new", params=NO_PRIORITY)
        if isinstance(a, Evict)
    ]
    assert evicted == ["gold"]


def test_it_pins_the_hottest_within_quota_and_leaves_a_slot() -> None:
    snap = engine(
        [Resident(n, "gpu") for n in ("a", "b", "c", "d")],
        gpu=4,
        cpu=6,
        versions={"d": info("d", tenant="t1")},
        quota={"t0": 1, "t1": 1},
    )
    d = demand_of({"a": 40, "b": 30, "c": 20, "d": 10})
    pins = [a.version for a in plan_actions(snap, d, params=NO_PRIORITY) if isinstance(a, Pin)]
    # quota 1 each: a (t0) and d (t1); b and c are hotter than d but t0 is full
    assert pins == ["a", "d"]


def test_a_pin_is_not_traded_for_a_slightly_hotter_version() -> None:
    snap = engine([Resident("a", "gpu", pinned=True), Resident("b", "gpu")], gpu=2, cpu=3)
    d = demand_of({"a": 20, "b": 24})
    assert plan_actions(snap, d, params=NO_PRIORITY) == []  # hysteresis
    d = demand_of({"a": 5, "b": 60})
    actions = plan_actions(snap, d, params=NO_PRIORITY)
    assert [type(a) for a in actions] == [Unpin, Pin]


def test_a_request_that_finds_every_slot_pinned_or_busy_gets_one() -> None:
    snap = engine(
        [
            Resident("p1", "gpu", pinned=True),
            Resident("p2", "gpu", pinned=True),
            Resident("busy", "gpu", in_flight=2),
        ],
        gpu=3,
        cpu=4,
    )
    d = demand_of({"p1": 50, "p2": 5, "busy": 5, "new": 1})
    actions = plan_actions(snap, d, incoming="new", params=NO_PRIORITY)
    assert Unpin("p2", "not among the most valuable, or its slot is needed") in actions


def test_pins_make_way_for_every_version_with_requests_waiting() -> None:
    # 4 slots, 3 idle pins; q1 and q2 have requests queued (not in a slot yet) and "new" arrives:
    # vLLM may batch all three, so each needs an unpinned slot and two pins must go, the least
    # valuable ones.
    snap = engine(
        [
            Resident("p1", "gpu", pinned=True),
            Resident("p2", "gpu", pinned=True),
            Resident("p3", "gpu", pinned=True),
            Resident("q1", "cpu", in_flight=2),
            Resident("q2", "cpu", in_flight=1),
        ],
        gpu=4,
        cpu=6,
    )
    d = demand_of({"p1": 50, "p2": 20, "p3": 10, "q1": 5, "q2": 5, "new": 1})
    unpinned = [
        a.version
        for a in plan_actions(snap, d, incoming="new", params=NO_PRIORITY)
        if isinstance(a, Unpin)
    ]
    assert sorted(unpinned) == ["p2", "p3"]


def test_demand_follows_a_burst_and_forgets_a_version_gone_cold() -> None:
    # One long scale: the short-scale switch alone (scale selection is tested below)
    d = DemandTracker(DemandParams(short_half_life=20, long_half_life=1000, alt_long_half_lives=()))
    for i in range(600):
        d.observe("old" if i % 3 else "steady", float(i))
    assert d.share("old") > d.share("steady") > 0.2
    for i in range(600, 660):
        d.observe("steady" if i % 2 else "burst", float(i))
    # 30 requests are little against a 1000-request memory, but the short scale sees the burst
    assert d.share("burst") > 0.3
    # "old" had two thirds of the traffic, then none for 60 requests: the short scale says it
    # cooled, while the long one alone would still give it about 0.6
    assert d.share("old") < 0.1
    # a steady version keeps its long-scale share: no switch on noise
    assert d.share("steady") == pytest.approx(0.33, abs=0.08)
    assert d.total_rate(660.0) == pytest.approx(1.0, rel=0.1)


def test_demand_predicts_with_the_long_scale_that_predicted_best() -> None:
    rng = random.Random(3)
    names = [f"v{i}" for i in range(40)]
    weights = [1 / (i + 1) for i in range(40)]
    steady = DemandTracker()
    for i in range(6000):
        steady.observe(rng.choices(names, weights)[0], float(i))
    # independent draws from a fixed popularity: the longest memory predicts best
    assert steady.long_half_life() == max(DemandParams().alt_long_half_lives)
    sessions = DemandTracker()
    t = 0.0
    for _ in range(1500):
        name = rng.choices(names, weights)[0]
        for _ in range(rng.randint(2, 6)):  # a caller's turns come together
            sessions.observe(name, t)
            t += 1.0
    # runs of one version: the shortest memory predicts best
    assert sessions.long_half_life() == min(DemandParams().alt_long_half_lives)


def test_a_tenant_that_falls_quiet_takes_its_versions_down_with_it() -> None:
    """Each of its versions alone is too rare to tell (200 requests without one, of 40 equally
    asked for, is within chance); together they are not (workers.cache_policy.demand)."""
    rng = random.Random(5)
    a = [f"a--v{i}--v1-0" for i in range(20)]
    b = [f"b--v{i}--v1-0" for i in range(20)]
    d = DemandTracker()
    t = 0.0
    for _ in range(3000):
        d.observe(rng.choice(a + b), t)
        t += 1.0
    before = sum(d.share(v) for v in a)
    assert before == pytest.approx(0.5, abs=0.1)
    for _ in range(200):  # tenant a's working day is over
        d.observe(rng.choice(b), t)
        t += 1.0
    assert sum(d.share(v) for v in a) < 0.1 * before
    assert sum(d.share(v) for v in b) == pytest.approx(1.0, abs=0.15)


def test_tenants_taking_turns_keep_a_long_memory_inside_each() -> None:
    """Popularity inside each tenant never changes, only which tenant is open: the long scale
    predicts a version within its tenant best, so it is the one chosen."""
    rng = random.Random(6)
    zones = [[f"z{z}--v{i}--v1-0" for i in range(15)] for z in range(3)]
    weights = [1 / (i + 1) for i in range(15)]
    d = DemandTracker()
    t = 0.0
    for block in range(24):
        for _ in range(400):
            d.observe(rng.choices(zones[block % 3], weights)[0], t)
            t += 1.0
    assert d.long_half_life() == max(DemandParams().alt_long_half_lives)
    # the open tenant's top version is predicted at about its share in that tenant
    open_now = zones[23 % 3]
    assert d.share(open_now[0]) == pytest.approx(weights[0] / sum(weights), rel=0.35)
    assert d.share(zones[0][0]) < 0.05  # a closed tenant's top version


def test_from_history_equals_observing() -> None:
    history = [(float(i), "ab"[i % 2]) for i in range(50)]
    d = DemandTracker.from_history(history)
    assert d.share("a") == pytest.approx(d.share("b"), rel=0.05)
    assert d.last_seen("b") == 49.0


def choice(name: str, where: str, free: int = 0, load: int = 0) -> EngineChoice:
    return EngineChoice(name, Tier(where), free, load, 10)


def test_engine_choice_prefers_gpu_then_cpu_then_free_slot_then_least_loaded() -> None:
    assert choose_engine([choice("a", "cpu"), choice("b", "gpu", load=5)]) == "b"
    assert choose_engine([choice("a", "none", free=1), choice("b", "cpu", load=5)]) == "b"
    assert choose_engine([choice("a", "none"), choice("b", "none", free=2, load=9)]) == "b"
    assert choose_engine([choice("a", "none", load=3), choice("b", "none", load=1)]) == "b"
    # a hot version on two engines spreads to the less loaded one
    assert choose_engine([choice("a", "gpu", load=8), choice("b", "gpu", load=2)]) == "b"
    # a saturated engine loses its preference
    assert choose_engine([choice("a", "gpu", load=25), choice("b", "none", load=0)]) == "b"
    with pytest.raises(ValueError):
        choose_engine([])


def test_engine_choice_keeps_a_tenant_off_engines_its_neighbours_use() -> None:
    """bench/neighbours.py: other tenants' recent work counts as load, so a tenant's
    requests keep to the engine its neighbours do not use while that engine has room."""

    def busy(name: str, load: int, others: float) -> EngineChoice:
        return EngineChoice(name, Tier.GPU, 0, load, 10, others_rate=others)

    # b is idle but a neighbour sends it 4 sequences a second: a, half full, is chosen
    assert choose_engine([busy("a", 5, 0.0), busy("b", 0, 4.0)]) == "a"
    # a neighbour asking once a minute hardly counts: the idle engine wins
    assert choose_engine([busy("a", 5, 0.0), busy("b", 0, 1 / 60)]) == "b"
    # a saturated engine loses its preference to an open one, idle or with a quiet neighbour
    assert choose_engine([busy("a", 20, 0.0), busy("b", 0, 0.5)]) == "b"
    # but not to an engine a busy neighbour keeps full of its own work: the tenant queues at home
    assert choose_engine([busy("a", 20, 0.0), busy("b", 0, 4.0)]) == "a"
    assert choose_engine([busy("a", 50, 0.0), busy("b", 0, 4.0)]) == "b"  # unless far worse
    # within a class only: a resident version is not loaded elsewhere to avoid a neighbour
    assert choose_engine([busy("a", 0, 4.0), EngineChoice("b", Tier.NONE, 2, 0, 10)]) == "a"


def test_engine_choice_keeps_live_requests_off_engines_running_background_ones() -> None:
    """docs/decisions/0012: background sequences on an engine weigh as a full engine more for a
    live request, within its residency class."""

    def lane(name: str, load: int, background: int, where: str = "gpu") -> EngineChoice:
        return EngineChoice(name, Tier(where), 1, load, 10, background=background)

    # b is idle, but an eval runs there: a live request goes to a, though a is busier
    assert choose_engine([lane("a", 6, 0), lane("b", 0, 2)]) == "a"
    # background everywhere: the least loaded, as without lanes
    assert choose_engine([lane("a", 6, 2), lane("b", 0, 2)]) == "b"
    # an engine fuller than a whole engine's worth is passed over for the eval's engine
    assert choose_engine([lane("a", 19, 0), lane("b", 0, 2)]) == "b"
    # residency first: a version hot only where the eval runs is not loaded elsewhere
    assert choose_engine([lane("a", 0, 2), lane("b", 0, 0, where="none")]) == "a"


def test_engine_choice_packs_background_requests_onto_their_lanes_engine() -> None:
    """A background request goes where its lane already runs, the engine running most of it
    first, while that engine has room for it beside the live headroom; then to an engine
    without background sequences, the least busy; residency first."""

    def lane(name: str, load: int, background: int, room: int = 2, where: str = "gpu"):
        return EngineChoice(
            name, Tier(where), 1, load, 10, background=background, background_room=room
        )

    def pick(*choices: EngineChoice) -> str:
        return choose_engine(choices, background=True)

    # nothing in the background lane yet: the least busy
    assert pick(lane("a", 3, 0), lane("b", 1, 0)) == "b"
    # a runs one background sequence, room for one more: packed there, though b is idle
    assert pick(lane("a", 1, 1), lane("b", 0, 0)) == "a"
    # the engine running most of the lane first: the lane converges on one engine
    assert pick(lane("a", 1, 1), lane("b", 3, 3)) == "b"
    # a's room is taken: the next engine, an idle one before one whose room is taken too
    assert pick(lane("a", 2, 2, room=0), lane("b", 0, 0)) == "b"
    assert pick(lane("a", 2, 2, room=0), lane("b", 3, 3, room=0), lane("c", 5, 0)) == "c"
    # residency first: the candidate is hot on a only
    assert pick(lane("a", 1, 1), lane("b", 0, 0, where="none"), lane("c", 4, 0)) == "a"
    assert pick(lane("a", 1, 1, where="none"), lane("b", 0, 0)) == "b"
    # the live lane's own order is unchanged by the flag's absence
    assert choose_engine([lane("a", 1, 1), lane("b", 0, 0)]) == "b"
