"""Requests held at an engine's pin guard (gateway.limits.Admission): the cache controller hears
of them, and they see its answer.

Pins are for quiet engines (workers.cache_policy.planner: at most `pin_max_busy` adapters served
at once lately). A request held back because the engine's pins leave too few unpinned GPU slots
shows the engine is not quiet, but it is not in flight there, so the controller could not see
it: the long tail then waited out the pins (up to 60 s). Now each held request is written to
the engine's held set (the controller counts those versions as served at once:
workers.engine_view.build_snapshot), the first one in a while asks for a converge pass, and the
waiting requests read the engine's pinned set (workers.engine_slots) again every round.
"""

from __future__ import annotations

import time

from redis import asyncio as aioredis

from gateway.limits import HELD_NOTE_S
from gateway.offloop import off_loop
from workers.shared_state import HELD_WINDOW_S, held_claim_key, held_key

_KEEP_S = 4 * HELD_WINDOW_S  # older entries are dropped as new ones come


class PinGuardLink:
    """gateway.limits.Held for the gateway's replica: its Redis."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def note(self, engine: str, served_name: str) -> None:
        now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(held_key(engine), {served_name: now})
        pipe.zremrangebyscore(held_key(engine), 0, now - _KEEP_S)
        pipe.expire(held_key(engine), int(_KEEP_S))
        # One pass per engine per HELD_NOTE_S, however many requests (and replicas) are held.
        pipe.set(held_claim_key(engine), "1", nx=True, px=int(HELD_NOTE_S * 1000))
        *_, first = await pipe.execute()
        if first:
            await off_loop(ask_for_converge)(engine)


def ask_for_converge(engine_name: str) -> None:
    """Off the event loop: a converge pass on the engine's node (workers.desired)."""
    from workers.desired import enqueue_converge
    from workers.models import Engine

    engine = Engine.objects.filter(name=engine_name).first()
    if engine is not None:
        enqueue_converge(engine)
