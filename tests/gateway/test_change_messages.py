"""Gateway replicas learn of changes from a Redis message (gateway.invalidation) instead of
reading the generation counters on every request; when the subscription drops, they check on
every request until it is back. Real Redis, an in-process Gateway."""

from __future__ import annotations

import asyncio
import os

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from gateway.app import Gateway
from gateway.invalidation import CHANGED_CHANNEL, ROUTES_KEY, announce
from tests.other_redis_database import run_on_other_redis_database


async def _until(condition, timeout: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


@pytest.fixture
async def gateway():
    gw = Gateway()
    gw._listener = asyncio.create_task(gw._listen_forever())
    yield gw
    await gw.aclose()


async def test_an_announced_change_marks_the_tables_stale(gateway):
    assert await _until(lambda: gateway._listening)
    gateway._stale = False
    before = gateway._checked
    # What a model save does once its transaction commits (gateway.invalidation._bump).
    await asyncio.to_thread(announce, ROUTES_KEY)
    assert await _until(lambda: gateway._stale)
    assert gateway._checked == before  # nothing was read yet: the next request reads


async def test_a_dropped_subscription_makes_every_request_check_until_it_is_back(gateway):
    assert await _until(lambda: gateway._listening)
    gateway._stale = False
    admin = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        # Only this replica's subscription (other processes share the Redis server).
        name = f"lp-gateway-{os.getpid()}"
        ours = [c["id"] for c in await admin.client_list(_type="pubsub") if c.get("name") == name]
        assert ours
        for client_id in ours:
            await admin.client_kill_filter(_id=client_id)
        assert await _until(lambda: not gateway._listening)
        assert gateway._stale  # the next request reads the counters
        assert await _until(lambda: gateway._listening)  # subscribed again
        gateway._stale = False
        await admin.publish(CHANGED_CHANNEL, ROUTES_KEY)
        assert await _until(lambda: gateway._stale)
    finally:
        await admin.aclose()


async def test_a_change_announced_on_another_redis_database_is_not_heard(gateway):
    """Redis pub/sub ignores the database number: another deployment sharing the server (CI's
    other test worker) made every replica here re-read its tables on each of its changes."""
    assert await _until(lambda: gateway._listening)
    gateway._stale = False
    await asyncio.to_thread(
        run_on_other_redis_database,
        "from gateway.invalidation import ROUTES_KEY, announce\n"
        "from workers import shared_state\n"
        "announce(ROUTES_KEY)\n"
        "shared_state.client().delete(ROUTES_KEY)\n",
    )
    await asyncio.sleep(1)
    assert not gateway._stale
