"""Fair sharing of a saturated engine (gateway/fairness.py), driven by real asyncio tasks."""

from __future__ import annotations

import asyncio

import pytest

from gateway.fairness import FairSlots, NoSlot


async def test_a_small_tenant_is_not_stuck_behind_a_burst():
    slots = FairSlots()
    order: list[str] = []
    gate = asyncio.Event()

    async def request(tenant: int, label: str) -> None:
        async with slots.slot("e", 2, tenant):
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
        async with slots.slot("e", 3, tenant):
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
    """Issue 19: n=4 on an engine of 4 slots fills it; for a tenant alone on the engine, a
    heavier one still runs, alone, and nobody jumps it."""
    slots = FairSlots()
    order: list[str] = []
    gates = {label: asyncio.Event() for label in ("big", "small", "huge", "last")}

    async def request(label: str, weight: int) -> None:
        async with slots.slot("e", 4, 1, weight):
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
    """Issue 19 (bench/neighbours.py, largest phase): while another tenant uses the engine, a
    request heavier than its tenant's share does not take the idle engine whole; it is passed
    over, holds up nobody, and its bounded wait ends in NoSlot (over its share)."""
    slots = FairSlots()
    async with slots.slot("e", 8, 2):  # tenant 2 has used the engine
        pass
    order: list[str] = []
    hold = asyncio.Event()

    async def request(tenant: int, label: str, weight: int, wait_s: float | None = None):
        async with slots.slot("e", 8, tenant, weight, wait_s):
            order.append(label)
            await hold.wait()

    heavy = asyncio.create_task(request(1, "heavy", 8, wait_s=0.05))  # share: 6 of 8
    await asyncio.sleep(0)
    assert order == []  # the engine is idle, but 8 would pass tenant 1's share
    b = asyncio.create_task(request(2, "b", 1))
    light = asyncio.create_task(request(1, "light", 6))
    await asyncio.sleep(0)
    assert order == ["b", "light"]  # neither waits behind the heavy one
    with pytest.raises(NoSlot) as refused:
        await heavy
    assert refused.value.over_share and (refused.value.share, refused.value.capacity) == (6, 8)
    hold.set()
    await asyncio.gather(b, light)
    assert slots.waiting("e") == 0


async def test_a_wait_for_a_full_engine_is_bounded():
    slots = FairSlots()
    hold = asyncio.Event()

    async def first() -> None:
        async with slots.slot("e", 2, 1, 2):
            await hold.wait()

    running = asyncio.create_task(first())
    await asyncio.sleep(0)
    with pytest.raises(NoSlot) as refused:
        async with slots.slot("e", 2, 1, 1, wait_s=0.05):
            pass
    assert not refused.value.over_share  # the engine was full, the request within its share
    assert slots.waiting("e") == 0  # the refused waiter left no entry behind
    hold.set()
    await running
    async with slots.slot("e", 2, 1, 2, wait_s=0.05):  # every slot free again
        pass


async def test_a_tenant_that_holds_its_slots_leaves_a_quarter_to_the_others():
    """Issue 19: streams nobody reads hold their slots; while another tenant uses the engine,
    one tenant holds at most three quarters of it, so the other is never queued behind it."""
    slots = FairSlots()
    order: list[str] = []
    hold = asyncio.Event()

    async def request(tenant: int, label: str) -> None:
        async with slots.slot("e", 8, tenant):
            order.append(label)
            await hold.wait()

    async with slots.slot("e", 8, 2):  # tenant 2 has used the engine
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
        async with slots.slot("e", 8, 1, weight):
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
