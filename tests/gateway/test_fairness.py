"""Fair sharing of a saturated engine (gateway/fairness.py), driven by real asyncio tasks."""

from __future__ import annotations

import asyncio

from gateway.fairness import FairSlots


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
