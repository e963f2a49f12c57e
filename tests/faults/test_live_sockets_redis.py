"""The portal's sockets while Redis is away, on a real portal (uvicorn) and a Redis of the suite's
own (killed, then restarted empty):

- a page's live metrics socket (the `live` channel layer, Redis pub/sub, fed by the publisher):
  what it sees during the outage, and that numbers reach it again after, with no hand: the
  publisher only sends to groups whose lease is in Redis, and a Redis restarted empty has none;
  each portal process renews its sockets' leases on its own beat (portal.consumers.WatchKeeper),
  so an open page is not left silent (before: it stayed open and got nothing until reloaded);
- the playground socket: a prompt while Redis is away gets an error frame with a code
  (`gateway.limits_unavailable`, the gateway's policy), the socket stays open (it listens on no
  channel layer: before, Redis's loss ended it), and the next prompt after Redis is back is
  answered.

The page's own behaviour is replayed by the test: live.js reconnects 3 s after any close other
than 4401/4403/4404.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from engine.sample_adapters import TINY_BASE_MODEL_NAME
from tests.faults.harness import portal_env
from tests.faults.record import REPO, FaultRecord, wait_until
from tests.faults.redis_server import OwnRedis
from tests.fixtures.gateway import running_gateway
from tests.gateway.hostile_support import one_engine_fixture  # noqa: F401 - fixture
from tests.gateway.test_playground_engines import browser_headers
from tests.paths import TEST_VAR

DOWN_S = 3.0
PAGE_RECONNECT_S = 3.0  # static/portal/live.js
FINAL_CLOSES = {4401, 4403, 4404}
TICK_KEY = "lp:live:tick:*"


def _ws(base: str, path: str) -> str:
    return base.replace("http://", "ws://") + path


async def _watch_page(base: str, headers: dict[str, str], own_redis: OwnRedis) -> dict:
    """A live page through the outage: its socket's closes, reconnects, and the first numbers
    after Redis is back (seconds from the restart)."""
    url = _ws(base, "/ws/tenants/acme/metrics/")
    seen: dict = {"closes": [], "reconnects": 0, "before": 0, "heal_s": None}
    restarted_at: float | None = None
    killed = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            async with connect(url, additional_headers=headers) as socket:
                while time.monotonic() < deadline:
                    try:
                        raw = await asyncio.wait_for(socket.recv(), timeout=1.0)
                    except TimeoutError:
                        raw = None
                    if raw is not None:
                        payload = json.loads(raw)
                        if restarted_at is None:
                            seen["before"] += 1
                        elif payload.get("sent_at", 0) > restarted_at:
                            seen["heal_s"] = round(time.time() - restarted_at, 2)
                            return seen
                    if not killed and seen["before"] >= 2:
                        own_redis.kill()
                        killed = True
                        await asyncio.sleep(DOWN_S)
                        own_redis.start()
                        restarted_at = time.time()
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else 1006
            seen["closes"].append(code)
            if code in FINAL_CLOSES:
                return seen
        except OSError as exc:  # refused: the page tries again the same way
            seen["closes"].append(type(exc).__name__)
        seen["reconnects"] += 1
        await asyncio.sleep(PAGE_RECONNECT_S)
    return seen


@pytest.mark.django_db(transaction=True)
def test_a_live_page_gets_numbers_again_after_redis_restarts_empty(
    world, own_redis, celery_worker_process
):
    publisher = subprocess.Popen(
        [sys.executable, "manage.py", "publish_live_metrics"],
        cwd=REPO,
        env={**portal_env(REDIS_URL=own_redis.url), "PYTHONUNBUFFERED": "1"},
        stdout=(TEST_VAR / "faults-live-publisher.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        with running_gateway(celery_worker_process["queue"], REDIS_URL=own_redis.url) as base:
            wait_until(lambda: own_redis.client().keys(TICK_KEY), timeout=30, what="ticks")
            seen = asyncio.run(
                _watch_page(base, browser_headers(base, world.users["alice"]), own_redis)
            )
        assert publisher.poll() is None, "the publisher died"
    finally:
        publisher.terminate()
        publisher.wait(timeout=20)
    assert seen["before"] >= 2
    assert not set(seen["closes"]) & FINAL_CLOSES, seen
    assert seen["heal_s"] is not None, f"no numbers after Redis came back: {seen}"
    closes = seen["closes"]
    FaultRecord(
        fault="live-socket-redis-restart",
        title=f"Redis killed for {DOWN_S:.0f} s and restarted empty under an open live "
        "metrics page (the `live` pub/sub layer, the publisher)",
        part="portal",
        caller_saw=(
            "the socket stayed open, with no numbers while Redis was away"
            if not closes
            else f"the socket closed ({', '.join(map(str, closes))}); the page reconnected "
            f"{seen['reconnects']} time(s) (live.js, every 3 s)"
        ),
        heal_s=seen["heal_s"],
        lost="the seconds Redis was away (numbers, replaced a second later); nothing else: the "
        "publisher's lease on the page's group renewed by the portal process's keeper "
        "(was: lost with Redis, the page silent until reloaded)",
        test="tests/faults/test_live_sockets_redis.py::"
        "test_a_live_page_gets_numbers_again_after_redis_restarts_empty",
    ).write()


async def _prompt(socket, key: str) -> list[dict]:
    await socket.send(json.dumps({"prompt": "Tea?", "models": [key], "max_tokens": 4}))
    frames = []
    while True:
        frame = json.loads(await asyncio.wait_for(socket.recv(), timeout=60))
        frames.append(frame)
        if frame["type"] in ("done", "error"):
            return frames


async def _playground_through_outage(base: str, headers: dict[str, str], own_redis: OwnRedis):
    key = f"base:{TINY_BASE_MODEL_NAME}"
    async with connect(_ws(base, "/ws/tenants/acme/playground/"), additional_headers=headers) as s:
        first = await _prompt(s, key)
        own_redis.kill()
        await asyncio.sleep(1.0)  # the socket outlives Redis's loss (no channel layer)
        asked = time.monotonic()
        away = await _prompt(s, key)
        away_s = round(time.monotonic() - asked, 2)
        await asyncio.sleep(DOWN_S)
        own_redis.start()
        back = time.monotonic()
        while True:
            again = await _prompt(s, key)
            if again[-1]["type"] == "done" or time.monotonic() - back > 60:
                break
            await asyncio.sleep(1.0)
        return first, away, away_s, again, round(time.monotonic() - back, 2)


@pytest.mark.engine
@pytest.mark.django_db(transaction=True)
def test_the_playground_answers_an_error_frame_while_redis_is_away_and_works_after(
    one_engine, own_redis, celery_worker_process
):
    world = one_engine.world
    with running_gateway(
        celery_worker_process["queue"],
        REDIS_URL=own_redis.url,
        GATEWAY_REDIS_TIMEOUT_SECONDS="1",
        GATEWAY_REFRESH_SECONDS="0",
    ) as base:
        first, away, away_s, again, heal_s = asyncio.run(
            _playground_through_outage(base, browser_headers(base, world.users["bob"]), own_redis)
        )
    assert first[-1]["type"] == "done", first
    error = away[-1]
    assert error["type"] == "error" and error["code"] == "gateway.limits_unavailable", away
    assert again[-1]["type"] == "done", again
    FaultRecord(
        fault="playground-redis-away",
        title=f"Redis killed for {DOWN_S:.0f} s under an open playground socket, then "
        "restarted empty",
        part="portal",
        caller_saw=f"a prompt meanwhile: an error frame `{error['code']}` after {away_s:.2f} s "
        "(the socket stays open); the next prompt after Redis is back answered",
        heal_s=heal_s,
        lost="nothing: the socket kept (was: closed when Redis went, the playground listened "
        "on the Redis channel layer); the refused prompt never reached an engine",
        test="tests/faults/test_live_sockets_redis.py::"
        "test_the_playground_answers_an_error_frame_while_redis_is_away_and_works_after",
    ).write()
