"""The live metrics publisher: once a second, one read of the gateway's series for every socket.

One process runs it (`manage.py publish_live_metrics`, a Procfile entry); a second one started by
mistake publishes nothing, since each second is claimed once in Redis. It sends on the `live`
channel layer (Redis pub/sub: one PUBLISH per group reaches every portal process, which hands
it to its own sockets; the core layer's one list push and one pop per socket and message cost
more than the numbers are worth keeping when nobody listens). Each tick reads the last
few seconds' hashes in one pipelined round trip and sends each watched tenant's part to its group
(`tenant-<id>.metrics`) and the fleet's totals (with each engine's slots by service class now)
to the operators' group: one message per group per second whatever the number of sockets,
which filter it to what their user may see.
The last seconds are sent again on the next ticks because the gateway's replicas flush their
measurements up to a second late; the browser replaces a second it already has.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from portal.live_access import ACCESS_GENERATION_KEY, TENANT_GENERATIONS_KEY, generation_of
from portal.live_series import (
    SECOND_PREFIX,
    evictions_by_period,
    fleet_classes,
    fleet_payload,
    parse_period,
    tenant_payload,
)

log = logging.getLogger(__name__)
WATCHED_KEY = "lp:live:watched"  # sorted set: group -> lease expiry (epoch seconds)
TICK_KEY = "lp:live:tick:"
SECONDS_SENT = 3  # the last three complete seconds, see the module docstring
WATCH_LEASE_SECONDS = 60
FLEET_GROUP = "fleet.metrics"


def metrics_group(tenant_id: int) -> str:
    return f"tenant-{tenant_id}.metrics"


def watched_member(*, tenant_id: int, tenant: str) -> str:
    return f"tenant|{tenant_id}|{tenant}"


async def watch(redis: aioredis.Redis, member: str, *, now: float) -> None:
    """A socket tells the publisher its group has someone listening (until the lease ends)."""
    await redis.zadd(WATCHED_KEY, {member: now + WATCH_LEASE_SECONDS})


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class TickReport:
    second: int
    groups: list[str] = field(default_factory=list)


class MetricsPublisher:
    def __init__(self, *, redis: aioredis.Redis, layer: Any) -> None:
        self.redis = redis
        self.layer = layer

    async def tick(self, *, now: float) -> TickReport | None:
        """Publish the seconds before `now`; None if this second was already published."""
        second = int(now)
        if not await self.redis.set(f"{TICK_KEY}{second}", "1", nx=True, ex=10):
            return None
        seconds = list(range(second - SECONDS_SENT, second))
        pipe = self.redis.pipeline(transaction=False)
        for s in seconds:
            pipe.hgetall(f"{SECOND_PREFIX}{s}")
        pipe.zremrangebyscore(WATCHED_KEY, "-inf", now)
        pipe.zrangebyscore(WATCHED_KEY, now, "+inf")
        pipe.get(ACCESS_GENERATION_KEY)
        pipe.hgetall(TENANT_GENERATIONS_KEY)
        *raw_periods, _, watched, global_gen, tenant_gens = await pipe.execute()
        periods = [parse_period(raw) for raw in raw_periods]
        tenant_gens = {_text(k): v for k, v in tenant_gens.items()}
        sends = []
        report = TickReport(second=second)
        for member in sorted(m.decode() for m in watched):
            if member == FLEET_GROUP:
                payload = await self._fleet_payload(seconds, periods)
                group = FLEET_GROUP
                gen = generation_of(global_gen)
            else:
                _, tenant_id, slug = member.split("|", 2)
                gen = generation_of(global_gen, tenant_gens.get(slug))
                group = metrics_group(int(tenant_id))
                payload = tenant_payload(tenant=slug, seconds=seconds, periods=periods)
            report.groups.append(group)
            sends.append(self._send(group, payload, gen))
        await asyncio.gather(*sends)
        return report

    async def _fleet_payload(self, seconds: list[int], periods: list[Any]) -> dict[str, Any]:
        evicted = await sync_to_async(evictions_by_period)(since=seconds[0], until=seconds[-1] + 1)
        classes = await sync_to_async(fleet_classes)()
        return fleet_payload(seconds=seconds, periods=periods, evicted=evicted, classes=classes)

    async def _send(self, group: str, payload: dict[str, Any], gen: str) -> None:
        payload["sent_at"] = time.time()  # publish -> receipt delay (bench/live_fanout.py)
        # Encoded once here, not once per socket: most sockets pass it on as it is.
        text = orjson.dumps(payload).decode()
        await self.layer.group_send(group, {"type": "live.metrics", "gen": gen, "text": text})

    async def run(self, stop: asyncio.Event) -> None:
        """Tick just after every second boundary until `stop` is set."""
        while not stop.is_set():
            now = time.time()
            try:
                await asyncio.wait_for(stop.wait(), timeout=math.ceil(now) - now + 0.02)
                return
            except TimeoutError:
                pass
            try:
                await self.tick(now=time.time())
            except (RedisError, OSError) as exc:  # Redis restarting: the next tick tries again
                log.warning("live metrics tick failed: %s", exc)
