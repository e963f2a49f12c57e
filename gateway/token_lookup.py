"""Who a bearer token is, from the gateway's tables alone: a made-up token is refused with no
database lookup and without the tables' refresh lock.

A prefix the tables do not hold may be a token minted a moment ago. Its mint bumped the routes'
generation in Redis before the minting call answered (gateway.invalidation), so one read of that
counter, taken after the request arrived, tells: unchanged, the token does not exist; moved, the
tables are re-read once. Every miss that arrives while a read is in flight waits for the next one,
so a flood of made-up tokens costs one Redis GET at a time, and requests with known tokens never
wait on any of it.
"""

from __future__ import annotations

import asyncio

from redis import asyncio as aioredis

from gateway.background import stop_if_cancelled, stop_tasks
from gateway.invalidation import ROUTES_KEY


class RoutesGeneration:
    """The routes' generation as Redis holds it, read at most once at a time for all who ask."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self.reads = 0  # GETs sent (tests and benchmarks read it)
        self._asked: asyncio.Future[int] | None = None
        self._reader: asyncio.Task[None] | None = None

    async def read_after_now(self) -> int:
        """A value Redis held after this call began: the next read to be sent, shared by every
        caller that asked before it was."""
        if self._asked is None:
            self._asked = asyncio.get_running_loop().create_future()
            if self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read_while_asked())
        return await asyncio.shield(self._asked)

    async def _read_while_asked(self) -> None:
        while self._asked is not None:
            asked, self._asked = self._asked, None
            try:
                raw = await self.redis.get(ROUTES_KEY)
                asked.set_result(int(raw or 0))
                self.reads += 1
            except Exception as exc:  # noqa: BLE001 - each asker raises it (RedisError: 503)
                asked.set_exception(exc)
                asked.exception()  # retrieved: askers that went away leave no warning
            finally:
                if not asked.done():  # the reader itself was cancelled
                    asked.cancel()
            stop_if_cancelled()

    async def aclose(self) -> None:
        await stop_tasks([self._reader])
        if self._asked is not None:
            self._asked.cancel()
            self._asked = None
