"""Weighted fair queueing of an engine's slots by service class, and the shed decision.

A class's plan is its weight (its share of a saturated engine against the other classes that
want it), the longest it may wait in the queue, and whether it may be shed. On a saturated
engine each class with requests is entitled to a weighted max-min fair share of the slots (water
filling: a class that wants less than its weight's part leaves the rest to the others, in
proportion to their weights). A class under its share may take the next slot; a class at it
waits; a class that holds nothing may always put one request in, so no class starves whatever
the weights. Where requests queue (one replica's), the slot that frees goes to the classes by
weighted fair queueing (ClassTurns).

Classes that may not be shed (gold) also have a headroom: on each engine the last `headroom`
slots are theirs alone (GATEWAY_CLASS_HEADROOM, like the live headroom background requests leave
free). A sheddable class goes in only while the engine keeps them free after it (`room`), so
that a gold request finds a free slot at once instead of waiting for the next release (vLLM
cannot preempt a running sequence for it); unless gold alone holds all of that room: then a
sheddable class holding nothing still puts one request in, and takes its fair share of the
engine back, so that gold cannot starve it.

A request held back is shed at once when its expected wait (its class's excess over its share,
drained at its share of the engine's drain rate) passes its class's bound, if its class may be
shed, and never while a lower class (lighter weight) holds slots: that slot is its at the next
release. Retry-After is that expected wait, rounded up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class ClassPlan:
    """One service class: its weight (share of a saturated engine), the longest a request of it
    waits for a slot (seconds), and whether its requests may be shed."""

    name: str
    weight: int
    max_wait_s: float
    sheddable: bool


DEFAULT_PLANS: tuple[ClassPlan, ...] = (
    ClassPlan("gold", 6, 10.0, False),
    ClassPlan("silver", 3, 5.0, True),
    ClassPlan("bronze", 1, 2.0, True),
)


def plans_by_name(plans: Iterable[ClassPlan]) -> dict[str, ClassPlan]:
    return {p.name: p for p in plans}


def _weight(plans: Mapping[str, ClassPlan], name: str) -> int:
    plan = plans.get(name)
    return max(1, plan.weight) if plan is not None else 1


def shares(
    capacity: float, demand: Mapping[str, float], plans: Mapping[str, ClassPlan]
) -> dict[str, float]:
    """Each class's weighted max-min fair share of `capacity` slots given what it wants
    (`demand`, slots): no class gets more than it wants, the rest is split by weight."""
    out = {name: 0.0 for name in demand}
    wanting = {name for name, want in demand.items() if want > 0}
    left = float(capacity)
    while wanting and left > EPSILON:
        total_weight = sum(_weight(plans, n) for n in wanting)
        satisfied = set()
        for name in wanting:
            part = left * _weight(plans, name) / total_weight
            if demand[name] - out[name] <= part + EPSILON:
                satisfied.add(name)
        if not satisfied:
            for name in wanting:
                out[name] += left * _weight(plans, name) / total_weight
            return out
        for name in satisfied:
            left -= demand[name] - out[name]
            out[name] = float(demand[name])
        wanting -= satisfied
    return out


def room(capacity: int, name: str, plans: Mapping[str, ClassPlan], headroom: int = 0) -> int:
    """The slots of an engine of `capacity` that class `name` may fill: all of them for a class
    that may not be shed, all but the `headroom` kept for those classes for one that may (at
    least one). A class with no plan is sheddable."""
    plan = plans.get(name)
    if plan is not None and not plan.sheddable:
        return capacity
    return max(1, capacity - max(0, headroom))


def may_take(
    capacity: int,
    load: Mapping[str, int],
    name: str,
    weight: int,
    plans: Mapping[str, ClassPlan],
    busy: int | None = None,
    headroom: int = 0,
) -> bool:
    """Whether a request of class `name` and `weight` slots may go onto an engine of `capacity`
    slots where `load` (class -> slots) is held (`busy`: every slot held there, classless ones
    too; default the classes' sum): always while the engine keeps room for it (all its slots
    for a class that may not be shed; a sheddable one leaves the last `headroom` free, `room`);
    past that, while its class holds nothing (no class starves) or stays within its weighted fair
    share of the engine, and for a sheddable class only while the classes that may not be shed
    hold all of its room by themselves (`crowded`). admission.lua runs the same rule in Redis."""
    held = load.get(name, 0)
    busy = sum(load.values()) if busy is None else busy
    slots = room(capacity, name, plans, headroom)
    if busy + weight <= slots or busy <= 0:
        return True  # room for it, or an idle engine (a request heavier than the room runs alone)
    if slots < capacity and not crowded(load, slots, plans):
        return False  # the headroom stays free for the classes that may not be shed
    if held <= 0:
        return True
    demand = {c: float(n) for c, n in load.items() if n > 0}
    demand[name] = held + weight
    return held + weight <= shares(capacity, demand, plans)[name] + EPSILON


def crowded(load: Mapping[str, int], slots: int, plans: Mapping[str, ClassPlan]) -> bool:
    """The classes that may not be shed hold all of a sheddable class's room (`slots`) by
    themselves: past the headroom, the sheddable classes then get one request in each and their
    fair share of the engine, so that gold cannot starve them."""
    held = sum(
        n for c, n in load.items() if (plan := plans.get(c)) is not None and not plan.sheddable
    )
    return held >= slots


class ClassTurns:
    """Which waiting class the next free slot goes to: weighted fair queueing (start-time fair
    queueing over classes). Each class has a virtual time, the service it had per unit of its
    weight; the slot goes to the waiting class with the least (ties: the heavier class), and a
    class that starts waiting joins at the current virtual time, so an idle class saves no credit
    and a busy one cannot be starved: over any stretch in which classes wait, each gets slots in
    proportion to its weight."""

    def __init__(self) -> None:
        self.vtime: dict[str, float] = {}
        self.now = 0.0

    def join(self, name: str) -> None:
        """`name` starts waiting (it had no waiter)."""
        self.vtime[name] = max(self.vtime.get(name, 0.0), self.now)

    def pick(self, waiting: Iterable[str], plans: Mapping[str, ClassPlan]) -> str | None:
        best: tuple[float, int, str] | None = None
        for name in waiting:
            key = (max(self.vtime.get(name, 0.0), self.now), -_weight(plans, name), name)
            if best is None or key < best:
                best = key
        return best[2] if best is not None else None

    def served(self, name: str, slots: int, plans: Mapping[str, ClassPlan]) -> None:
        """`name` was given `slots` slots."""
        start = max(self.vtime.get(name, 0.0), self.now)
        self.now = start
        self.vtime[name] = start + slots / _weight(plans, name)


def lower_class_holds(name: str, load: Mapping[str, int], plans: Mapping[str, ClassPlan]) -> bool:
    """A class lighter than `name` holds slots on the engine (the next release can go to it)."""
    w = _weight(plans, name)
    return any(n > 0 and _weight(plans, c) < w for c, n in load.items() if c != name)


def expected_wait_s(
    capacity: int,
    load: Mapping[str, int],
    name: str,
    weight: int,
    plans: Mapping[str, ClassPlan],
    drain_per_s: float,
    headroom: int = 0,
) -> float | None:
    """How long a request of class `name` held back now should wait for its slot: its class's
    excess over its fair share (of the engine's room for it, `room`), drained at that share of
    the engine's drain rate (slots freed a second); for a sheddable class held by the headroom,
    at least the engine's excess over that room, drained at the whole rate. None when the drain
    rate is not known yet."""
    held = load.get(name, 0)
    demand = {c: float(n) for c, n in load.items() if n > 0}
    demand[name] = held + weight
    slots = room(capacity, name, plans, headroom)
    share = shares(slots, demand, plans)[name]
    excess = max(0.0, held + weight - share)
    over_room = 0.0
    if slots < capacity and not crowded(load, slots, plans):
        over_room = max(0.0, sum(load.values()) + weight - slots)
    if excess <= EPSILON and over_room <= EPSILON:
        return 0.0
    if drain_per_s <= 0:
        return None
    class_drain = drain_per_s * max(share, 1.0) / max(1, capacity)
    return max(excess / class_drain, over_room / drain_per_s)


def should_shed(plan: ClassPlan, wait_s: float | None, waited_s: float, lower_holds: bool) -> bool:
    """Shed now: the class may be shed, no lighter class holds a slot it could take at the next
    release, and its expected wait (or, not known, the time it waited already) passes its bound."""
    if not plan.sheddable or lower_holds:
        return False
    if wait_s is None:
        return waited_s >= plan.max_wait_s
    return wait_s > plan.max_wait_s or waited_s >= plan.max_wait_s


def retry_after_s(wait_s: float | None) -> int:
    """Retry-After for a shed request: its expected wait, rounded up, at least a second."""
    if wait_s is None or not math.isfinite(wait_s):
        return 1
    return max(1, math.ceil(wait_s))


def engine_priority(name: str, plans: Iterable[ClassPlan], background: bool = False) -> int:
    """The `priority` a request is sent to the engine with (vLLM's --scheduling-policy priority
    runs the lowest value first): 0 for the heaviest class, 1 for the next, ...; a background
    request and a request of no known class after them all."""
    order = [p.name for p in sorted(plans, key=lambda p: (-p.weight, p.name))]
    if background or name not in order:
        return len(order)
    return order.index(name)


class DrainMeter:
    """An engine's drain rate (slots freed a second, every replica's) from a counter that only
    grows (the load hash's `drained` field), smoothed over HALF_LIFE_S."""

    HALF_LIFE_S = 5.0

    def __init__(self) -> None:
        self.rate = 0.0
        self._last: tuple[int, float] | None = None

    def observe(self, drained: int, now: float) -> float:
        if self._last is not None:
            count, at = self._last
            dt = now - at
            if dt > 0 and drained >= count:
                sample = (drained - count) / dt
                keep = 0.5 ** (dt / self.HALF_LIFE_S)
                self.rate = sample if self.rate == 0.0 else keep * self.rate + (1 - keep) * sample
        self._last = (drained, now)
        return self.rate
