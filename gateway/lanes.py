"""Where background sequences (eval runs') run now, as engine choice needs it
(workers.cache_policy.routing: live requests keep off those engines, background ones pack onto
them; docs/decisions/0012-live-and-background-keep-apart.md).

The admission script counts every request in its engine's load hash by lane, whichever replica
or worker sent it (workers.redis_contract.keys.load_key). A replica reads the background lane of
every engine it knows each GATEWAY_LANE_POLL_SECONDS, off the request path: a request reads
nothing from Redis to choose. A count seen within SEEN_FOR_S still counts, so that the moment
between two of a run's cases (one ended, the next not yet admitted) does not send a live request
onto the engine the run is on. This process's own background requests count at once, before the
next read (an eval runner's gateway packs its own requests by them).
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
from workers.redis_contract.keys import load_key

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

    def background(self, engine: str) -> int:
        """Background sequences on `engine`: the last read from Redis while it is recent, or
        this process's own when more."""
        count, at = self.seen.get(engine, (0, 0.0))
        if time.monotonic() - at > SEEN_FOR_S:
            count = 0
        return max(count, self.own.get(engine, 0))

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

    async def read(self, engines: Iterable[str]) -> None:
        """One read of every engine's background lane (one round trip)."""
        names = list(engines)
        if not names:
            return
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.hget(load_key(name), "background")
        counts = await pipe.execute()
        now = time.monotonic()
        for name, raw in zip(names, counts, strict=True):
            count = int(raw or 0)
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
