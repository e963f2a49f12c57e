"""Fair sharing of a saturated engine between tenants.

vLLM queues whatever it is sent first-in first-out, so one tenant's burst would delay every
other tenant's requests behind it. The gateway therefore sends an engine at most `capacity`
requests at once (its --max-num-seqs, times a setting) and keeps the rest waiting here, one queue
per tenant, admitted round-robin across tenants as slots free up: a tenant with one request waits
for at most one request of each other tenant, however many the others have queued.
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
    queues: dict[int, deque[asyncio.Future[None]]] = field(default_factory=dict)
    turn: deque[int] = field(default_factory=deque)  # tenants with waiters, in admission order

    def waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())


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
    async def slot(self, engine: str, capacity: int, tenant: int) -> AsyncIterator[None]:
        slots = self._slots(engine, capacity)
        if slots.active < slots.capacity and not slots.turn:
            slots.active += 1
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            queue = slots.queues.setdefault(tenant, deque())
            if not queue:
                slots.turn.append(tenant)
            queue.append(future)
            try:
                await future  # a releasing request hands its slot over (active unchanged)
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._release(slots)  # the slot was handed to us as we went away
                else:
                    self._forget(slots, tenant, future)
                raise
        try:
            yield
        finally:
            self._release(slots)

    def _forget(self, slots: _EngineSlots, tenant: int, future: asyncio.Future[None]) -> None:
        queue = slots.queues.get(tenant)
        if queue and future in queue:
            queue.remove(future)
            if not queue:
                del slots.queues[tenant]
                if tenant in slots.turn:
                    slots.turn.remove(tenant)

    def _release(self, slots: _EngineSlots) -> None:
        """Hand the slot to the next tenant in turn, or free it."""
        while slots.turn:
            tenant = slots.turn.popleft()
            queue = slots.queues[tenant]
            future = queue.popleft()
            if queue:
                slots.turn.append(tenant)  # its next request waits for everyone else's turn
            else:
                del slots.queues[tenant]
            if not future.done():
                future.set_result(None)
                return
        slots.active -= 1
