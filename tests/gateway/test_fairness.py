"""Fair sharing of a saturated engine (gateway/fairness.py), driven by real asyncio tasks."""

from __future__ import annotations

import asyncio

import pytest

from gateway.fairness import Ask, FairSlots, NoSlot


async def test_a_small_tenant_is_not_stuck_behind_a_burst():
    slots = FairSlots()
    order: list[str] = []
    gate = asyncio.Event()

    async def request(tenant: int, label: str) -> None:
        async with slots.slot("e", 2, Ask(tenant)):
            order.append(label)
            await gate.wait()

    # Tenant 1 fills the engine and queues 20 more; tenant 2 then asks twice.
    burst = [asyncio.create_task(request(1, f"a{i}")) for i in range(22)]
    await asyncio.sleep(0)
    small = [asyncio.create_task(request(2, f"b{i}")) for i in range(2)]
    await asyncio.sleep(0)
    assert order == ["a0", "a1"] and slots.waiting("e") == 22
    gate.set()
    await asyncio.gather(*burst, *small)
    # Admission alternates between the tenants while both wait: b0 and b1 come within the
    # next four admissions, not after tenant 1's twenty.
    assert order.index("b0") <= 3 and order.index("b1") <= 5
    assert len(order) == 24 and slots.waiting("e") == 0


async def test_never_more_than_capacity_in_flight_and_cancelled_waiters_leave_no_hole():
    slots = FairSlots()
    running = 0
    peak = 0

    async def request(tenant: int) -> None:
        nonlocal running, peak
        async with slots.slot("e", 3, Ask(tenant)):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1

    tasks = [asyncio.create_task(request(i % 4)) for i in range(30)]
    await asyncio.sleep(0)
    tasks[10].cancel()
    tasks[11].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == 2
    assert peak == 3
    # Everything released: a new request gets a slot at once.
    await asyncio.wait_for(request(9), timeout=1)


async def test_a_request_takes_as_many_slots_as_sequences_it_runs():
    """n=4 on an engine of 4 slots fills it; for a tenant alone on the engine, a
    heavier one still runs, alone, and nobody jumps it."""
    slots = FairSlots()
    order: list[str] = []
    gates = {label: asyncio.Event() for label in ("big", "small", "huge", "last")}

    async def request(label: str, weight: int) -> None:
        async with slots.slot("e", 4, Ask(1, weight)):
            order.append(label)
            await gates[label].wait()

    big = asyncio.create_task(request("big", 4))
    await asyncio.sleep(0)
    small = asyncio.create_task(request("small", 1))
    await asyncio.sleep(0)
    assert order == ["big"]  # the engine is full: the small one waits
    gates["big"].set()
    await big
    await asyncio.sleep(0)
    assert order == ["big", "small"]
    huge = asyncio.create_task(request("huge", 9))  # heavier than the engine: waits for room
    await asyncio.sleep(0)
    last = asyncio.create_task(request("last", 1))  # behind it: no jumping
    await asyncio.sleep(0)
    assert order == ["big", "small"]
    gates["small"].set()
    await small
    await asyncio.sleep(0)
    assert order == ["big", "small", "huge"]  # alone on the engine
    gates["huge"].set()
    gates["last"].set()
    await asyncio.gather(huge, last)
    assert order == ["big", "small", "huge", "last"] and slots.waiting("e") == 0


async def test_a_request_heavier_than_its_share_never_takes_a_shared_engine():
    """bench/neighbours.py, largest phase: while another tenant uses the engine, a
    request heavier than its tenant's share does not take the idle engine whole: it is refused
    at once (NoSlot, over its share), so it holds up nobody and its caller does not wait out its
    budget for an answer that cannot come while the other tenant is there."""
    slots = FairSlots()
    async with slots.slot("e", 8, Ask(2)):  # tenant 2 has used the engine
        pass
    order: list[str] = []
    hold = asyncio.Event()

    async def request(tenant: int, label: str, weight: int, wait_s: float | None = None):
        async with slots.slot("e", 8, Ask(tenant, weight, wait_s)):
            order.append(label)
            await hold.wait()

    with pytest.raises(NoSlot) as refused:
        await request(1, "heavy", 8)  # no wait bound given: refused without waiting at all
    assert refused.value.over_share and (refused.value.share, refused.value.capacity) == (6, 8)
    assert order == [] and slots.waiting("e") == 0
    b = asyncio.create_task(request(2, "b", 1))
    light = asyncio.create_task(request(1, "light", 6))
    await asyncio.sleep(0)
    assert order == ["b", "light"]
    hold.set()
    await asyncio.gather(b, light)
    assert slots.waiting("e") == 0


async def test_a_heavy_request_runs_once_the_other_tenant_has_gone_quiet():
    """With no other tenant in the sharing window the engine is the tenant's whole: the same
    request that was refused above runs, alone."""
    slots = FairSlots(shared_window_s=0.05)
    async with slots.slot("e", 8, Ask(2)):
        pass
    with pytest.raises(NoSlot):
        async with slots.slot("e", 8, Ask(1, 8)):
            pass
    await asyncio.sleep(0.06)
    async with slots.slot("e", 8, Ask(1, 8, wait_s=0)):
        assert slots.load("e") == 8


async def test_a_waiter_held_by_its_share_is_let_in_when_the_sharing_lapses():
    """CI, 2026-12-01: a request waiting only for its tenant's share, with nobody left to
    release a slot, waited out its whole budget on an idle engine. Waiters are re-checked when
    the sharing lapses: here at 0.05 s, well inside the 5 s wait."""
    slots = FairSlots(shared_window_s=0.05)
    hold = asyncio.Event()

    async def holder() -> None:
        async with slots.slot("e", 8, Ask(1, 6)):
            await hold.wait()

    async with slots.slot("e", 8, Ask(2)):  # tenant 2 used the engine: tenant 1's share is 6
        pass
    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    # One more for tenant 1 passes its share: it waits; nothing will be released meanwhile.
    async with slots.slot("e", 8, Ask(1, 1, wait_s=5.0)):
        assert slots.load("e") == 7  # let in once tenant 2 was quiet for the window
    hold.set()
    await held


async def test_a_wait_for_a_full_engine_is_bounded():
    slots = FairSlots()
    hold = asyncio.Event()

    async def first() -> None:
        async with slots.slot("e", 2, Ask(1, 2)):
            await hold.wait()

    running = asyncio.create_task(first())
    await asyncio.sleep(0)
    with pytest.raises(NoSlot) as refused:
        async with slots.slot("e", 2, Ask(1, 1, wait_s=0.05)):
            pass
    assert not refused.value.over_share  # the engine was full, the request within its share
    assert slots.waiting("e") == 0  # the refused waiter left no entry behind
    hold.set()
    await running
    async with slots.slot("e", 2, Ask(1, 2, wait_s=0.05)):  # every slot free again
        pass


async def test_a_tenant_that_holds_its_slots_leaves_a_quarter_to_the_others():
    """Streams nobody reads hold their slots; while another tenant uses the engine,
    one tenant holds at most three quarters of it, so the other is never queued behind it."""
    slots = FairSlots()
    order: list[str] = []
    hold = asyncio.Event()

    async def request(tenant: int, label: str) -> None:
        async with slots.slot("e", 8, Ask(tenant)):
            order.append(label)
            await hold.wait()

    async with slots.slot("e", 8, Ask(2)):  # tenant 2 has used the engine
        pass
    hogs = [asyncio.create_task(request(1, f"a{i}")) for i in range(10)]
    await asyncio.sleep(0)
    assert len(order) == 6  # 8 slots, a quarter kept back
    b = asyncio.create_task(request(2, "b"))
    await asyncio.sleep(0)
    assert order[-1] == "b"  # in at once, not behind tenant 1's queue
    hold.set()
    await asyncio.gather(*hogs, b)
    assert slots.waiting("e") == 0


async def test_an_engines_load_counts_sequences_running_and_waiting():
    """Engine choice compares loads: a request with n=4 weighs four (before, one)."""
    slots = FairSlots()
    hold = asyncio.Event()

    async def request(weight: int) -> None:
        async with slots.slot("e", 8, Ask(1, weight)):
            await hold.wait()

    tasks = [asyncio.create_task(request(4)), asyncio.create_task(request(1))]
    await asyncio.sleep(0)
    assert slots.load("e") == 5 and slots.load("other") == 0
    tasks.append(asyncio.create_task(request(6)))  # no room: waits, and counts
    await asyncio.sleep(0)
    assert slots.waiting("e") == 1 and slots.load("e") == 11
    hold.set()
    await asyncio.gather(*tasks)
    assert slots.load("e") == 0


async def test_a_tenants_recent_work_on_an_engine_fades_with_its_half_life(monkeypatch):
    """What engine choice reads as a neighbour's rate: a decayed sum of the sequences it asked
    for, turned into sequences a second; halved after each half-life, none of the asker's own."""
    from gateway import fairness

    now = [1000.0]
    monkeypatch.setattr(fairness.time, "monotonic", lambda: now[0])
    slots = FairSlots()
    for _ in range(10):
        async with slots.slot("e", 8, Ask(2, 2)):
            pass
    rate = slots.others_rate("e", 1)
    assert rate == pytest.approx(20 * 0.6931 / fairness.USAGE_HALF_LIFE_S, rel=1e-3)
    assert slots.others_rate("e", 2) == 0.0 and slots.others_rate("other", 1) == 0.0
    now[0] += fairness.USAGE_HALF_LIFE_S
    assert slots.others_rate("e", 1) == pytest.approx(rate / 2)


async def test_an_eval_request_waits_behind_its_tenants_live_ones():
    """Background requests (an eval run's cases) queue behind live ones of the same tenant,
    queued earlier or later, and take no free slot while a live one waits."""
    slots = FairSlots()
    order: list[str] = []
    gate = asyncio.Event()

    async def request(label: str, background: bool) -> None:
        async with slots.slot("e", 1, Ask(1, background=background)):
            order.append(label)
            await gate.wait()

    first = asyncio.create_task(request("live0", False))
    await asyncio.sleep(0)
    evals = [asyncio.create_task(request(f"eval{i}", True)) for i in range(3)]
    await asyncio.sleep(0)
    live = [asyncio.create_task(request(f"live{i}", False)) for i in (1, 2)]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *evals, *live)
    assert order == ["live0", "live1", "live2", "eval0", "eval1", "eval2"]


async def test_a_saturated_engine_goes_to_the_classes_by_weight_and_none_starves():
    """Service classes (issue 46): three tenants, gold, silver and bronze, each with a burst
    queued on a one-slot engine; the slots go 6:3:1 while all wait, bronze's included."""
    from gateway.class_policy import DEFAULT_PLANS

    slots = FairSlots()
    order: list[str] = []
    gate = asyncio.Event()

    async def request(tenant: int, klass: str) -> None:
        async with slots.slot("e", 1, Ask(tenant, service_class=klass, plans=DEFAULT_PLANS)):
            order.append(klass)
            await gate.wait()

    first = asyncio.create_task(request(9, "bronze"))  # holds the slot while the bursts queue
    await asyncio.sleep(0)
    bursts = [
        asyncio.create_task(request(tenant, klass))
        for tenant, klass in ((1, "gold"), (2, "silver"), (3, "bronze"))
        for _ in range(20)
    ]
    await asyncio.sleep(0)
    assert order == ["bronze"] and slots.waiting("e") == 60
    gate.set()
    await asyncio.gather(first, *bursts)
    served = order[:30]  # the first thirty slots (the first bronze's included): 6:3:1
    assert (served.count("gold"), served.count("silver"), served.count("bronze")) == (18, 9, 3)
    assert len(order) == 61 and slots.waiting("e") == 0
