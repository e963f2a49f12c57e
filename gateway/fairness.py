"""Fair sharing of a saturated engine between tenants.

vLLM queues whatever it is sent first-in first-out, so one tenant's burst would delay every
other tenant's requests behind it. The gateway therefore sends an engine at most `capacity`
requests at once (its --max-num-seqs, times a setting) and keeps the rest waiting here, one queue
per tenant, admitted round-robin across tenants as slots free up: a tenant with one request waits
for at most one request of each other tenant, however many the others have queued.

A request takes as many slots as sequences it will run (its weight: n x prompts), so a request
with n=8 is not let in as if it were one; a request heavier than the engine still runs, alone.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass
class _EngineSlots:
    capacity: int
    active: int = 0
    queues: dict[int, deque[tuple[asyncio.Future[None], int]]] = field(default_factory=dict)
    turn: deque[int] = field(default_factory=deque)  # tenants with waiters, in admission order

    def waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def fits(self, weight: int) -> bool:
        return self.active == 0 or self.active + weight <= self.capacity


class FairSlots:
    def __init__(self) -> None:
        self._engines: dict[str, _EngineSlots] = {}

    def _slots(self, engine: str, capacity: int) -> _EngineSlots:
        slots = self._engines.get(engine)
        if slots is None:
            slots = self._engines[engine] = _EngineSlots(capacity=max(1, capacity))
        slots.capacity = max(1, capacity)
        return slots

    def waiting(self, engine: str) -> int:
        slots = self._engines.get(engine)
        return slots.waiting() if slots else 0

    @asynccontextmanager
    async def slot(
        self, engine: str, capacity: int, tenant: int, weight: int = 1
    ) -> AsyncIterator[None]:
        slots = self._slots(engine, capacity)
        if slots.fits(weight) and not slots.turn:
            slots.active += weight
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            queue = slots.queues.setdefault(tenant, deque())
            if not queue:
                slots.turn.append(tenant)
            queue.append((future, weight))
            try:
                await future  # a releasing request let us in (our weight is counted)
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._release(slots, weight)  # let in as we went away
                else:
                    self._forget(slots, tenant, future)
                raise
        try:
            yield
        finally:
            self._release(slots, weight)

    def _forget(self, slots: _EngineSlots, tenant: int, future: asyncio.Future[None]) -> None:
        queue = slots.queues.get(tenant)
        entry = next((e for e in queue or () if e[0] is future), None)
        if queue is not None and entry is not None:
            queue.remove(entry)
            if not queue:
                del slots.queues[tenant]
                if tenant in slots.turn:
                    slots.turn.remove(tenant)

    def _release(self, slots: _EngineSlots, weight: int) -> None:
        """Give the slots back, then let waiters in, tenant by tenant in turn, while they fit."""
        slots.active -= weight
        while slots.turn:
            tenant = slots.turn[0]
            queue = slots.queues[tenant]
            future, need = queue[0]
            if future.done():  # cancelled while waiting: skip it
                queue.popleft()
            elif slots.fits(need):
                queue.popleft()
                slots.active += need
                future.set_result(None)
            else:
                return  # the tenant in turn waits for room; nobody jumps it
            slots.turn.popleft()
            if queue:
                slots.turn.append(tenant)  # its next request waits for everyone else's turn
            else:
                del slots.queues[tenant]
