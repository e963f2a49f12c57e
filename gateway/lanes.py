"""Where background sequences (eval runs') run now, as engine choice needs it
(workers.cache_policy.routing: live requests keep off those engines, background ones pack onto
them; docs/decisions/0012-live-and-background-keep-apart.md).

The admission script counts every request in its engine's load hash by lane, whichever replica
or worker sent it (workers.redis_contract.keys.load_key). A replica reads the background lane of
every engine it knows each GATEWAY_LANE_POLL_SECONDS, off the request path: a request reads
nothing from Redis to choose. A count seen within SEEN_FOR_S still counts, so that the moment
between two of a run's cases (one ended, the next not yet admitted) does not send a live request
onto the engine the run is on. Background work that comes in bursts (shadow pairs: a few pairs
every few seconds, each a candidate ask and two judge calls) leaves a mark as well: each
background request chosen for an engine marks the engine with its tenant (lane_key) for
GATEWAY_LANE_MEMORY_SECONDS, which every read counts as a background sequence there, so live
requests keep off that engine between bursts and the next burst, from any process, packs onto
it again. The mark says whose work it is: another tenant's background work is avoided before
any other load (`others_background`, workers.cache_policy.routing), a tenant's own weighs as
a full engine (its live requests keep off its own eval run's engine while one serves them as
well, and stay beside its own shadow pairs rather than move onto a neighbour's engine). A count
in flight with no mark (its mark lost with Redis) is taken for another tenant's. This process's
own background requests count at once, before the next read, and for SEEN_FOR_S after they end
(a shadow pair's judge calls follow its candidate ask).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from django.conf import settings
from redis import asyncio as aioredis

from gateway.background import stop_if_cancelled
from gateway.routes import EngineInfo
from workers.redis_contract.keys import lane_key, load_key

log = logging.getLogger(__name__)

# How long a background count read from Redis keeps counting after it was seen.
SEEN_FOR_S = 2.0


def engine_slots(engine: EngineInfo) -> int:
    """Sequences one replica sends the engine at once (GATEWAY_ENGINE_SLOTS_FACTOR)."""
    return max(1, int(engine.capacity * settings.GATEWAY_ENGINE_SLOTS_FACTOR))


def background_room(engine: EngineInfo) -> int:
    """Background sequences the engine takes while nothing else runs there: its slots less
    GATEWAY_LIVE_HEADROOM, at least one (the admission script's rule, admission.lua)."""
    return max(1, engine_slots(engine) - settings.GATEWAY_LIVE_HEADROOM)


class LaneWatch:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self.seen: dict[str, tuple[int, float]] = {}  # engine -> (background, when read)
        self.own: dict[str, int] = {}  # engine -> this process's background weight there
        # engine -> (tenants whose background work marked it, when read); None: a count with
        # no mark (whose is unknown)
        self.whose: dict[str, tuple[frozenset[int] | None, float]] = {}

    def background(self, engine: str) -> int:
        """Background sequences on `engine`: the last read from Redis while it is recent, or
        this process's own when more."""
        count, at = self.seen.get(engine, (0, 0.0))
        if time.monotonic() - at > SEEN_FOR_S:
            count = 0
        return max(count, self.own.get(engine, 0))

    def others_background(self, engine: str, tenant: int) -> bool:
        """Whether background work of a tenant other than `tenant` runs (or ran lately) on
        `engine`, as last read."""
        if self.background(engine) <= 0:
            return False
        tenants, at = self.whose.get(engine, (frozenset(), 0.0))
        if time.monotonic() - at > SEEN_FOR_S:
            tenants = frozenset()
        return tenants is None or any(t != tenant for t in tenants)

    @contextmanager
    def holding(self, engine: str, weight: int, background: bool) -> Iterator[None]:
        """Count a background request of this process on `engine` while the block runs."""
        if not background:
            yield
            return
        self.own[engine] = self.own.get(engine, 0) + weight
        try:
            yield
        finally:
            left = self.own.get(engine, 0) - weight
            if left > 0:
                self.own[engine] = left
            else:
                self.own.pop(engine, None)

    async def mark(self, engine: str, tenant: int) -> None:
        """A background request of `tenant` from this process goes to `engine`: seen here at
        once (for SEEN_FOR_S after it ends too), and by every process's reads for
        GATEWAY_LANE_MEMORY_SECONDS (a hash: tenant -> until when, unix time). A Redis that does
        not answer only loses the mark."""
        now = time.monotonic()
        count, _ = self.seen.get(engine, (0, 0.0))
        self.seen[engine] = (max(1, count), now)
        tenants, _ = self.whose.get(engine, (frozenset(), 0.0))
        self.whose[engine] = (None if tenants is None else tenants | {tenant}, now)
        memory = settings.GATEWAY_LANE_MEMORY_SECONDS
        if memory <= 0:
            return
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hset(lane_key(engine), str(tenant), f"{time.time() + memory:.3f}")
            pipe.pexpire(lane_key(engine), round(memory * 1000))
            await pipe.execute()
        except Exception:  # noqa: BLE001 - the request goes on; the lane's count still holds
            stop_if_cancelled()
            log.warning("gateway: could not mark the background lane of %s", engine)

    async def read(self, engines: Iterable[str]) -> None:
        """One read of every engine's background lane and mark (one round trip)."""
        names = list(engines)
        if not names:
            return
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hget(load_key(name), "background")
            pipe.hgetall(lane_key(name))
        raw_all = await pipe.execute()
        now, wall = time.monotonic(), time.time()
        for i, name in enumerate(names):
            raw, marks = raw_all[2 * i], raw_all[2 * i + 1]
            tenants = frozenset(int(t) for t, until in marks.items() if float(until) > wall)
            count = max(int(raw or 0), 1 if tenants else 0)
            if count > 0:
                self.whose[name] = (tenants or None, now)
            if count > 0:
                self.seen[name] = (count, now)
            elif name in self.seen and now - self.seen[name][1] > SEEN_FOR_S:
                del self.seen[name]

    async def run_forever(self, engines: Callable[[], Iterable[str]]) -> None:
        """Read the lanes of `engines()` (the replica's current tables) every
        GATEWAY_LANE_POLL_SECONDS, through Redis outages."""
        while True:
            stop_if_cancelled()
            try:
                await self.read(engines())
            except Exception:  # noqa: BLE001 - choice goes on with what was last seen
                stop_if_cancelled()
                log.warning("gateway: could not read the engines' lanes", exc_info=True)
            await asyncio.sleep(max(0.01, settings.GATEWAY_LANE_POLL_SECONDS))
