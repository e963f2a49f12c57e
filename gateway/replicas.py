"""A gateway replica's lease on what it holds in the shared counts (gateway.limits' ledgers).

Each replica renews a lease key in Redis every quarter of GATEWAY_REPLICA_LEASE_SECONDS and, on
the same beat, gives back the holds of every replica whose lease lapsed (a replica killed in the
middle of its requests: its tenants' in-flight counts, its versions' concurrency and the engines'
in-flight counts drop within one lease and a beat, instead of the counters' one-hour TTL), and
sends the releases its own requests could not send while Redis was away.
"""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings
from redis import asyncio as aioredis

from gateway.background import stop_if_cancelled
from gateway.limits import Scripts
from workers.redis_contract.keys import (
    BUDGETS_REAPED,
    BUDGETS_REAPED_REQUEST,
    LEASE_PREFIX,
    LEDGER_PREFIX,
    REPLICAS,
    lease_key,
)
from workers.redis_contract.scripts import REAP

log = logging.getLogger(__name__)


class ReplicaLease:
    def __init__(self, redis: aioredis.Redis, scripts: Scripts) -> None:
        self.redis = redis
        self.scripts = scripts
        self.reap = redis.register_script(REAP)

    @property
    def lease_s(self) -> float:
        return float(settings.GATEWAY_REPLICA_LEASE_SECONDS)

    async def beat(self) -> int:
        """Renew this replica's lease, reap lapsed ones, flush releases kept back; returns how
        many replicas were reaped. Raises RedisError while Redis is away."""
        replica = self.scripts.replica
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(lease_key(replica), "1", px=int(self.lease_s * 1000))
        pipe.sadd(REPLICAS, replica)
        await pipe.execute()
        await self.scripts.flush_pending()
        reaped = int(
            await self.reap(
                keys=[REPLICAS],
                args=[
                    LEASE_PREFIX,
                    LEDGER_PREFIX,
                    replica,
                    BUDGETS_REAPED,
                    BUDGETS_REAPED_REQUEST,
                ],
            )
        )
        if reaped:
            log.warning("gateway: gave back the holds of %d lapsed replica(s)", reaped)
        # Budgets: the reaped worst cases persisted, the counts rebuilt if Redis lost them,
        # settles kept back sent.
        await self.scripts.budgets.rebuild()
        return reaped

    async def run_forever(self) -> None:
        while True:
            stop_if_cancelled()  # a cancellation the last beat's library swallowed
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Redis away: the next beat tries again
                stop_if_cancelled()
                log.warning("gateway: replica lease beat failed", exc_info=True)
            await asyncio.sleep(self.lease_s / 4)
