"""Fair sharing of a saturated engine between tenants.

vLLM queues whatever it is sent first-in first-out, so one tenant's burst would delay every
other tenant's requests behind it. The gateway therefore sends an engine at most `capacity`
requests at once (its --max-num-seqs, times a setting) and keeps the rest waiting here, one queue
per tenant, admitted round-robin across tenants as slots free up: a tenant with one request waits
for at most one request of each other tenant, however many the others have queued.

A request takes as many slots as sequences it will run (its weight: n x prompts), so a request
with n=8 is not let in as if it were one. While another tenant has used the engine in the last
SHARED_WINDOW_S, no tenant holds more than three quarters of its slots: slots are held until a
reply is delivered, so a tenant whose callers stop reading (or whose requests run long) would
otherwise hold the whole engine and every other tenant would queue behind it
(bench/neighbours.py). That share bounds a single request too: one heavier than its tenant's
share while the engine is shared is refused at once (`NoSlot`, over its share: the caller can ask
for fewer sequences instead of waiting out its budget), and a tenant alone on an engine uses all
of it, a request heavier than the engine included (it waits for the engine to be idle, then runs
alone). A waiter is re-checked when the sharing lapses as well as on every release: with nobody
left to release, a request held back only by the share would otherwise wait out its budget on an
idle engine.
Before the share bound a single request, the largest one a plan allowed (2 prompts x n=4 on an
8-slot engine) took a whole engine the moment it was idle, and the other tenant's requests then
queued behind it for its whole run (B: p99 9x alone, 4 of 70 answered 504).
Background requests (an eval run's cases, GatewayRequest.background) wait behind live ones: in
their tenant's queue a live request goes before every background one, and a background request
never takes a free slot while its tenant has a live request waiting.
A wait for a slot is bounded (`wait_s`, the rest of the request's time budget): past it,
`NoSlot`, which the gateway answers as a capacity refusal.
With service classes (docs/classes.md) the slot that frees goes first to a class, by weighted
fair queueing over the slots each class was given here (gateway.class_policy.ClassTurns), then, within
that class, to the tenants in their round-robin turn. Across replicas the admission script keeps
each class within its share of the engine (gateway.limits); this queue orders what one replica
holds back.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from gateway.class_policy import ClassPlan, ClassTurns, plans_by_name

SHARED_WINDOW_S = 60.0
USAGE_HALF_LIFE_S = 10.0  # how fast a tenant's recent work on an engine is forgotten


@dataclass(slots=True)
class Ask:
    """What one request asks of an engine's slots: its tenant, its weight (sequences), how long
    it may wait for them (None: as long as it takes), and whether it is a background request."""

    tenant: int
    weight: int = 1
    wait_s: float | None = None
    background: bool = False
    service_class: str = ""  # '' : no class (classes off)
    plans: tuple[ClassPlan, ...] = ()


class NoSlot(Exception):
    """No slot within the wait: the engine stayed full, or the request is heavier than its
    tenant's share while another tenant uses the engine."""

    def __init__(self, weight: int, share: int, capacity: int) -> None:
        super().__init__(f"no slot for {weight} of {capacity} (share {share})")
        self.weight, self.share, self.capacity = weight, share, capacity

    @property
    def over_share(self) -> bool:
        """Refused by its tenant's share of a shared engine, not by a full engine."""
        return self.share < self.capacity and self.weight > self.share


def _decayed(entry: tuple[float, float] | None, now: float) -> float:
    if entry is None:
        return 0.0
    value, at = entry
    return value * 0.5 ** ((now - at) / USAGE_HALF_LIFE_S)


@dataclass
class _EngineSlots:
    capacity: int
    active: int = 0
    # tenant -> its waiters (future, weight, background, class), live ones before background
    queues: dict[int, deque[tuple[asyncio.Future[None], int, bool, str]]] = field(
        default_factory=dict
    )
    turn: deque[int] = field(default_factory=deque)  # tenants with waiters, in admission order
    held: dict[int, int] = field(default_factory=dict)  # tenant -> slots it holds
    window_s: float = SHARED_WINDOW_S  # another tenant asked within it: the engine is shared
    # tenant -> (sequences it asked for, decayed with USAGE_HALF_LIFE_S; when it last asked)
    usage: dict[int, tuple[float, float]] = field(default_factory=dict)
    class_held: dict[str, int] = field(default_factory=dict)  # class -> slots it holds here
    plans: dict[str, ClassPlan] = field(default_factory=dict)
    turns: ClassTurns = field(default_factory=ClassTurns)

    def waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def live_waiting(self, tenant: int) -> bool:
        return any(not background for _, _, background, _ in self.queues.get(tenant, ()))

    def note(self, tenant: int, weight: int) -> None:
        now = time.monotonic()
        self.usage[tenant] = (_decayed(self.usage.get(tenant), now) + weight, now)
        if len(self.usage) > 64:  # forget tenants gone quiet (past the window, work faded)
            self.usage = {
                t: u
                for t, u in self.usage.items()
                if now - u[1] < self.window_s or _decayed(u, now) >= 0.01
            }

    def others_rate(self, tenant: int) -> float:
        """Sequences a second that the other tenants sent here lately (a decayed sum turned into
        a rate: a steady r a second sums to r x half-life / ln 2)."""
        now = time.monotonic()
        total = sum(_decayed(u, now) for t, u in self.usage.items() if t != tenant)
        return total * math.log(2) / USAGE_HALF_LIFE_S

    def tenant_share(self, tenant: int) -> int:
        """The most `tenant` may hold: every slot while no other tenant used the engine
        lately, else all but a quarter of them (at least one left for the others)."""
        now = time.monotonic()
        shared = any(t != tenant and now - at < self.window_s for t, (_, at) in self.usage.items())
        return max(1, self.capacity - max(1, self.capacity // 4)) if shared else self.capacity

    def shared_until(self, tenant: int) -> float:
        """When the engine stops being shared for `tenant` (monotonic time; 0: it is not)."""
        others = [at for t, (_, at) in self.usage.items() if t != tenant]
        until = max(others) + self.window_s if others else 0.0
        return until if until > time.monotonic() else 0.0

    def fits(self, weight: int, tenant: int) -> bool:
        share = self.tenant_share(tenant)
        if self.active == 0:
            # Idle: in it goes, however heavy, unless that would pass a shared engine's share.
            return weight <= share or share == self.capacity
        held = self.held.get(tenant, 0)
        return self.active + weight <= self.capacity and held + weight <= share

    def waiter_first(self) -> bool:
        """Whether a waiting request goes before a newcomer: one waiting for room does (nobody
        jumps it); one held back only by its tenant's share does not hold up other tenants."""
        return any(
            queue and not self.at_share(tenant, queue[0][1])
            for tenant, queue in self.queues.items()
        )

    def at_share(self, tenant: int, weight: int) -> bool:
        """Held back by its own share: `weight` more than it holds would pass it (a request
        heavier than a shared engine's share alone does)."""
        share = self.tenant_share(tenant)
        return share < self.capacity and self.held.get(tenant, 0) + weight > share

    def take(self, weight: int, tenant: int, klass: str = "") -> None:
        self.active += weight
        self.held[tenant] = self.held.get(tenant, 0) + weight
        if klass:
            self.class_held[klass] = self.class_held.get(klass, 0) + weight
            self.turns.served(klass, weight, self.plans)

    def give_back(self, weight: int, tenant: int, klass: str = "") -> None:
        self.active -= weight
        if klass:
            self.class_held[klass] = max(0, self.class_held.get(klass, 0) - weight)
        left = self.held.get(tenant, 0) - weight
        if left > 0:
            self.held[tenant] = left
        else:
            self.held.pop(tenant, None)


class FairSlots:
    def __init__(self, shared_window_s: float = SHARED_WINDOW_S) -> None:
        self._engines: dict[str, _EngineSlots] = {}
        self.shared_window_s = shared_window_s

    def _slots(self, engine: str, capacity: int) -> _EngineSlots:
        slots = self._engines.get(engine)
        if slots is None:
            slots = self._engines[engine] = _EngineSlots(
                capacity=max(1, capacity), window_s=self.shared_window_s
            )
        slots.capacity = max(1, capacity)
        return slots

    def waiting(self, engine: str) -> int:
        slots = self._engines.get(engine)
        return slots.waiting() if slots else 0

    def others_rate(self, engine: str, tenant: int) -> float:
        """Other tenants' recent sequences a second on the engine: engine choice keeps a
        tenant's traffic off engines its neighbours use while others have room."""
        slots = self._engines.get(engine)
        return slots.others_rate(tenant) if slots else 0.0

    def load(self, engine: str) -> int:
        """Sequences running on the engine and waiting for it: what engine choice compares (a
        request with n=4 weighs four, not one)."""
        slots = self._engines.get(engine)
        if slots is None:
            return 0
        return slots.active + sum(w for queue in slots.queues.values() for _, w, _, _ in queue)

    @asynccontextmanager
    async def slot(self, engine: str, capacity: int, ask: Ask) -> AsyncIterator[None]:
        """Hold `ask.weight` of the engine's slots while the block runs; wait at most
        `ask.wait_s` for them (NoSlot after it). A background request waits behind its tenant's
        live ones."""
        slots = self._slots(engine, capacity)
        tenant, weight, klass = ask.tenant, ask.weight, ask.service_class
        if ask.plans:
            slots.plans = plans_by_name(ask.plans)
        slots.note(tenant, weight)
        share = slots.tenant_share(tenant)
        if share < slots.capacity and weight > share:
            raise NoSlot(weight, share, slots.capacity)  # could not run while others use it
        jumps_live = ask.background and slots.live_waiting(tenant)
        if slots.fits(weight, tenant) and not slots.waiter_first() and not jumps_live:
            slots.take(weight, tenant, klass)
        else:
            await self._queue(slots, ask)
        try:
            yield
        finally:
            self._release(slots, weight, tenant, klass)

    async def _queue(self, slots: _EngineSlots, ask: Ask) -> None:
        """Wait in the tenant's queue (live before background) until let in, at most
        `ask.wait_s`."""
        tenant, weight = ask.tenant, ask.weight
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = slots.queues.setdefault(tenant, deque())
        if not queue:
            slots.turn.append(tenant)
        entry = (future, weight, ask.background, ask.service_class)
        if ask.service_class and not any(
            e[3] == ask.service_class for q in slots.queues.values() for e in q
        ):
            slots.turns.join(ask.service_class)  # its class starts waiting
        first_background = next((i for i, e in enumerate(queue) if e[2]), None)
        if ask.background or first_background is None:
            queue.append(entry)
        else:
            queue.insert(first_background, entry)  # live before background
        try:
            await self._wait(slots, future, ask.wait_s)
        except TimeoutError:
            if not future.done():
                future.cancel()
                self._forget(slots, tenant, future)
                raise NoSlot(weight, slots.tenant_share(tenant), slots.capacity) from None
            # let in just as the wait ran out: go on
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(slots, weight, tenant, ask.service_class)  # let in as we went away
            else:
                future.cancel()
                self._forget(slots, tenant, future)
            raise

    async def _wait(
        self, slots: _EngineSlots, future: asyncio.Future[None], wait_s: float | None
    ) -> None:
        """Wait until a release (or a re-check here) lets us in, at most `wait_s` (TimeoutError).
        Each time the engine's sharing lapses, the waiters are re-checked: their shares grew."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            lapse = max(slots.shared_until(t) for t in slots.queues) if slots.queues else 0.0
            chunk = left
            if lapse:
                until_lapse = lapse - time.monotonic() + 0.01
                chunk = until_lapse if left is None else min(left, until_lapse)
            try:
                # Shielded: a timeout must not cancel the future under a release setting it.
                await asyncio.wait_for(asyncio.shield(future), chunk)
                return
            except TimeoutError:
                if future.done() or (left is not None and chunk is not None and chunk >= left):
                    raise
                self._admit_waiters(slots)

    def _forget(self, slots: _EngineSlots, tenant: int, future: asyncio.Future[None]) -> None:
        queue = slots.queues.get(tenant)
        entry = next((e for e in queue or () if e[0] is future), None)
        if queue is not None and entry is not None:
            queue.remove(entry)
            if not queue:
                del slots.queues[tenant]
                if tenant in slots.turn:
                    slots.turn.remove(tenant)

    def _release(self, slots: _EngineSlots, weight: int, tenant: int, klass: str = "") -> None:
        """Give the slots back, then let waiters in, tenant by tenant in turn, while they fit.
        A tenant at its share is passed over (it keeps its turn); one that needs more room
        than is free stops the round: nobody jumps it."""
        slots.give_back(weight, tenant, klass)
        self._admit_waiters(slots)

    @staticmethod
    def _next_turn(slots: _EngineSlots) -> int:
        """Where in the tenants' turn the next waiter is: the first tenant (round-robin), or with
        classes the first tenant whose next request is of the class the slot goes to."""
        heads: list[str] = []
        for tenant in slots.turn:
            head = next((e for e in slots.queues[tenant] if not e[0].done()), None)
            heads.append(head[3] if head is not None else "")
        classes = {c for c in heads if c}
        if not classes:
            return 0
        chosen = slots.turns.pick(classes, slots.plans)
        return heads.index(chosen) if chosen in heads else 0

    def _admit_waiters(self, slots: _EngineSlots) -> None:
        for _ in range(len(slots.turn)):
            if not slots.turn:
                return
            index = self._next_turn(slots)
            waiter = slots.turn[index]
            queue = slots.queues[waiter]
            while queue and queue[0][0].done():  # cancelled while waiting
                queue.popleft()
            if not queue:
                del slots.turn[index]
                del slots.queues[waiter]
                continue
            future, need, _, klass = queue[0]
            if not slots.fits(need, waiter):
                if slots.at_share(waiter, need):
                    del slots.turn[index]  # at its share: the next tenant's turn
                    slots.turn.append(waiter)
                    continue
                return
            queue.popleft()
            slots.take(need, waiter, klass)
            future.set_result(None)
            del slots.turn[index]
            if queue:
                slots.turn.append(waiter)  # its next request waits for everyone else's turn
            else:
                del slots.queues[waiter]
