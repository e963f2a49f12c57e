"""The gateway's background loops stop when cancelled, even when a library turns the
cancellation into an ordinary error or swallows it (gateway.background), and a closed gateway
leaves none behind: the suite's shutdown of an event loop hung on a replica's lease loop that had
gone back to sleep (seen in three full runs, 2026-12-03)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import pytest
from redis import asyncio as aioredis
from redis.asyncio.client import PubSub

from gateway.app import Gateway
from gateway.limits import Scripts
from gateway.replicas import ReplicaLease


@pytest.fixture
async def lease(settings):
    redis = aioredis.Redis.from_url(settings.REDIS_URL)
    yield ReplicaLease(redis, Scripts(redis))
    await redis.aclose()


async def cancelled_once_started(loop: Coroutine[Any, Any, None], started: asyncio.Event):
    """Run `loop`, cancel it once (when `started` is set), and give it 3 s to stop."""
    task = asyncio.create_task(loop)
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    await asyncio.wait({task}, timeout=3)
    return task


async def test_a_lease_loop_whose_beat_hides_its_cancellation_still_stops(lease: ReplicaLease):
    in_beat = asyncio.Event()

    async def beat_that_hides_cancellation() -> int:
        if in_beat.is_set():  # only the first: a failing test must not hang the loop's close
            await asyncio.sleep(60)
        in_beat.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("a library's own error for a cancelled read") from None
        return 0

    lease.beat = beat_that_hides_cancellation  # type: ignore[method-assign]
    task = await cancelled_once_started(lease.run_forever(), in_beat)
    assert task.done() and task.cancelled()  # before: back to sleep, never done


async def test_a_lease_loop_whose_beat_swallows_its_cancellation_still_stops(
    lease: ReplicaLease, settings
):
    """A library that catches the cancellation and returns as if its call had succeeded: no error
    reaches the loop, yet it stops at its next turn instead of beating on forever."""
    settings.GATEWAY_REPLICA_LEASE_SECONDS = 0.4
    in_beat = asyncio.Event()

    async def beat_that_swallows_cancellation() -> int:
        if in_beat.is_set():  # only the first: a failing test must not hang the loop's close
            await asyncio.sleep(60)
        in_beat.set()
        with contextlib.suppress(asyncio.CancelledError):  # what the library does
            await asyncio.sleep(60)
        return 0

    lease.beat = beat_that_swallows_cancellation  # type: ignore[method-assign]
    task = await cancelled_once_started(lease.run_forever(), in_beat)
    assert task.done() and task.cancelled()  # before: beat after beat, never done


async def test_closing_a_gateway_stops_every_background_loop(transactional_db, settings):
    """Gateway.aclose (a replica's end, each test's own gateway) leaves no loop behind, even one
    that swallowed the first cancellation while it was not yet asking for it."""
    settings.GATEWAY_REPLICA_LEASE_SECONDS = 40.0  # one turn would outlast the close's patience
    gateway = Gateway()
    in_beat, swallowed = asyncio.Event(), asyncio.Event()
    beats = 0

    async def beat_that_swallows_one_cancellation() -> int:
        nonlocal beats
        beats += 1
        if beats == 1:
            in_beat.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                swallowed.set()
                asyncio.current_task().uncancel()  # type: ignore[union-attr]  # hide it for good
        return 0

    gateway.lease.beat = beat_that_swallows_one_cancellation  # type: ignore[method-assign]
    await gateway.fresh_table()  # starts the lease, change-message and flush loops
    loops = [gateway._leaser, gateway._listener, gateway._flusher]
    assert all(task is not None and not task.done() for task in loops)
    await asyncio.wait_for(in_beat.wait(), 5)
    await gateway.aclose()
    assert swallowed.is_set()
    assert all(task is not None and task.done() for task in loops)


async def test_a_change_listener_whose_read_swallows_its_cancellation_still_stops(
    transactional_db, monkeypatch
):
    """The change-message loop reads in bounded turns: a read that swallows the cancellation and
    answers "no message" does not keep it waiting (listen() would read on forever)."""
    gateway = Gateway()
    in_read = asyncio.Event()

    async def read_that_swallows_cancellation(self, *args, **kwargs):
        if in_read.is_set():  # only the first: a failing test must not hang the loop's close
            await asyncio.sleep(60)
        in_read.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(60)
        return None

    monkeypatch.setattr(PubSub, "get_message", read_that_swallows_cancellation)
    task = await cancelled_once_started(gateway._listen_forever(), in_read)
    assert task.done() and task.cancelled()
    await gateway.redis.aclose()
