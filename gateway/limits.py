"""Admission: the tenant's requests per minute and the adapter's concurrent requests (or an alias
target's own lower cap), shared by every replica through Redis in one round trip; refusals are
429 with Retry-After.

The engine's in-flight count (workers.shared_state) is raised in the same round trip: the cache
controller never evicts a version with requests in flight or queued.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis import asyncio as aioredis

from gateway.errors import too_many
from gateway.routes import RouteTable, Target
from workers.shared_state import inflight_key

CONCURRENCY_TTL_S = 3600  # a replica that died mid-request cannot block an adapter forever


def _rpm_key(tenant_id: int, minute: int) -> str:
    return f"lp:gw:rpm:{tenant_id}:{minute}"


def _conc_key(served_name: str) -> str:
    return f"lp:gw:conc:{served_name}"


def concurrency_limit(target: Target) -> int:
    """The lower of the adapter's cap and the alias target's own (a canary's); 0 = no cap.

    Both count the version's requests in flight on every replica: a canary capped at 2 never
    runs more than 2 at once when reached through its alias.
    """
    caps = [c for c in (target.max_concurrent, target.alias_max_concurrent) if c]
    return min(caps) if caps else 0


@asynccontextmanager
async def admitted(
    redis: aioredis.Redis,
    table: RouteTable,
    *,
    tenant_id: int,
    target: Target | None,
    requested: object,
) -> AsyncIterator[None]:
    now = time.time()
    minute = int(now // 60)
    limit = table.rpm.get(tenant_id, 0)
    pipe = redis.pipeline(transaction=False)
    if tenant_id:
        pipe.incr(_rpm_key(tenant_id, minute))
        pipe.expire(_rpm_key(tenant_id, minute), 120)
    if target is not None:
        pipe.incr(_conc_key(target.served_name))
        pipe.expire(_conc_key(target.served_name), CONCURRENCY_TTL_S)
    results = await pipe.execute() if (tenant_id or target) else []
    used = int(results[0]) if tenant_id else 0
    running = int(results[2 if tenant_id else 0]) if target is not None else 0

    async def undo() -> None:
        if target is not None:
            await redis.decr(_conc_key(target.served_name))

    if tenant_id and limit and used > limit:
        await undo()
        raise too_many(
            f"Rate limit reached: {limit} requests per minute for this tenant.",
            retry_after=60 - int(now % 60),
            code="rate_limit_exceeded",
        )
    cap = concurrency_limit(target) if target is not None else 0
    if cap and running > cap:
        await undo()
        raise too_many(
            f"{requested} has {cap} requests running, its limit; retry shortly.",
            retry_after=1,
            code="concurrency_limit_exceeded",
        )
    try:
        yield
    finally:
        await undo()


async def inflight(redis: aioredis.Redis, engine: str, served_name: str, delta: int) -> None:
    """The controller's view of requests on an engine (raised before sending, lowered after)."""
    key = inflight_key(engine)
    left = await redis.hincrby(key, served_name, delta)
    if left <= 0:
        await redis.hdel(key, served_name)
