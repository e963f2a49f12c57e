"""What a gateway replica holds in the shared counts, against the real Redis (gateway.limits'
ledgers, gateway.replicas' lease): a dead replica's holds are given back by a live one's beat
once its lease lapsed, and only its own; a release is never given back twice, even retried
after Redis ran it. (A release Redis did not take, kept for the next beat, is tested with a
real stalled Redis: tests/faults/test_gateway_release_lost.py.)"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from gateway import limits
from gateway.replicas import ReplicaLease
from tests.gateway.test_engine_admission import _target
from workers.redis_contract.keys import REPLICAS, inflight_key, lease_key

pytestmark = pytest.mark.django_db


@pytest.fixture
async def redis():
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    yield client
    await client.aclose()


@pytest.fixture
def lease_s(settings):
    settings.GATEWAY_REPLICA_LEASE_SECONDS = 0.4
    return 0.4


class Names:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.tenant_id = int(uuid.uuid4().int % 10**8) + 10**9
        self.served = f"v-{tag}"
        self.engine = f"e-{tag}"

    def admission(self, scripts: limits.Scripts) -> limits.Admission:
        return limits.Admission(
            scripts,
            limits.Terms(
                tenant_id=self.tenant_id,
                rpm_limit=0,
                in_flight_cap=10,
                target=_target(self.served),
                requested=self.served,
            ),
        )

    async def counts(self, redis: aioredis.Redis) -> tuple[int, int, int]:
        tenant = int(await redis.get(f"lp:gw:tflight:{self.tenant_id}") or 0)
        conc = int(await redis.get(f"lp:gw:conc:{self.served}") or 0)
        engine = int(await redis.hget(inflight_key(self.engine), self.served) or 0)
        return tenant, conc, engine


async def test_a_dead_replicas_holds_are_given_back_by_a_live_ones_beat_and_only_its(
    redis, lease_s
):
    names = Names()
    dead, live = limits.Scripts(redis), limits.Scripts(redis)
    dead_lease, live_lease = ReplicaLease(redis, dead), ReplicaLease(redis, live)
    await dead_lease.beat()
    await live_lease.beat()
    for scripts in (dead, dead, live):
        await names.admission(scripts).admit(names.engine)
    assert await names.counts(redis) == (3, 3, 3)
    await live_lease.beat()  # the dead one's lease still runs: nothing reaped
    assert await names.counts(redis) == (3, 3, 3)
    await asyncio.sleep(lease_s + 0.1)  # the dead one beats no more; its lease lapses
    assert await live_lease.beat() >= 1  # (and any other replica an earlier test left dead)
    assert await names.counts(redis) == (1, 1, 1)  # the live replica's hold is still counted
    assert not await redis.exists(dead.ledger)
    assert dead.replica.encode() not in await redis.smembers(REPLICAS)
    assert await live_lease.beat() == 0  # reaped once
    assert await names.counts(redis) == (1, 1, 1)
    await redis.delete(lease_key(live.replica))
    await redis.srem(REPLICAS, live.replica)


async def test_a_release_retried_after_redis_ran_it_gives_back_nothing_more(redis):
    names = Names()
    scripts = limits.Scripts(redis)
    first, second = names.admission(scripts), names.admission(scripts)
    await first.admit(names.engine)
    await second.admit(names.engine)
    keys = [
        f"lp:gw:tflight:{names.tenant_id}",
        f"lp:gw:conc:{names.served}",
        inflight_key(names.engine),
        first.ledger,
    ]
    await first.release()
    # The same release again (as if its answer had been lost and it was kept for a retry).
    scripts.pending.append((keys, [1, 1, names.served]))
    assert await scripts.flush_pending() == 1
    assert await names.counts(redis) == (1, 1, 1)  # the second request is still counted
    await second.release()
    assert await names.counts(redis) == (0, 0, 0)
    assert not await redis.exists(scripts.ledger)
