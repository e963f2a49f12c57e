"""Admission to an engine with pins (gateway.limits.engine_admit) against the real Redis: never
more distinct unpinned adapters in flight than unpinned GPU slots."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from gateway import limits
from workers import shared_state


@pytest.fixture
async def redis():
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    yield client
    await client.aclose()


async def test_with_a_pin_only_one_other_adapter_runs_at_a_time_on_two_slots(redis):
    engine = f"e-{uuid.uuid4().hex[:6]}"
    pinned = frozenset({"p"})
    admit = lambda name: limits.engine_admit(  # noqa: E731
        redis, engine, name, pinned=pinned, max_loras=2
    )
    await admit("a")
    await admit("a")  # the same adapter again: no new slot needed
    await admit("p")  # the pinned one has its own slot
    waiting = asyncio.create_task(admit("b"))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # b would be the second unpinned adapter in a batch: it waits
    assert shared_state.inflight_counts(engine) == {"a": 2, "p": 1}
    await limits.inflight(redis, engine, "a", -1)
    await limits.inflight(redis, engine, "a", -1)
    await asyncio.wait_for(waiting, timeout=2)
    assert shared_state.inflight_counts(engine) == {"b": 1, "p": 1}
    shared_state.inflight_clear(engine)


async def test_without_pins_nothing_waits(redis):
    engine = f"e-{uuid.uuid4().hex[:6]}"
    for name in "abcdef":
        await asyncio.wait_for(
            limits.engine_admit(redis, engine, name, pinned=frozenset(), max_loras=2), timeout=1
        )
    assert len(shared_state.inflight_counts(engine)) == 6
    shared_state.inflight_clear(engine)
