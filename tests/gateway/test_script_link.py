"""The gateway's lean script path (gateway.script_link) against a real Redis server of the
test's own: scripts by SHA with one EVAL when the server lost them, failures as redis-py's
exceptions, a connection that timed out or was cancelled never reused, a bounded pool, and the
client's own database and name."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.script_link import ScriptLink
from tests.faults.redis_server import OwnRedis, own_redis  # noqa: F401 - a fixture

COUNT = "redis.call('INCR', KEYS[1]) return redis.call('GET', KEYS[1])"
ECHO = "return ARGV[1]"


@pytest.fixture
def server(own_redis: OwnRedis) -> OwnRedis:  # noqa: F811 - the fixture by name
    return own_redis


def _client(server: OwnRedis, **options) -> aioredis.Redis:
    return aioredis.Redis.from_pool(
        aioredis.BlockingConnectionPool.from_url(
            f"redis://127.0.0.1:{server.port}/3", client_name="lp-gateway-test", **options
        )
    )


def _link_clients(server: OwnRedis) -> list[dict]:
    return [c for c in server.client().client_list() if c.get("name") == "lp-gateway-test"]


async def test_a_script_runs_once_even_when_the_server_lost_it(server):
    link = ScriptLink(_client(server, socket_timeout=2))
    count = link.script(COUNT)
    assert await count(keys=["n"], args=[]) == b"1"
    server.client().script_flush()
    assert await count(keys=["n"], args=[]) == b"2"  # NOSCRIPT, then sent whole: ran once
    # The client's database and name: the key is in db 3, the connection named as the client.
    assert server.client().get("n") is None
    assert redis.Redis(port=server.port, db=3).get("n") == b"2"
    assert len(_link_clients(server)) == 1
    await link.aclose()


async def test_many_calls_go_in_one_round_trip_each_answered_in_order(server):
    """Script.many (the budgets' settles of a batch): one write, every reply in its place, a
    script error returned where it happened, a lost script sent whole for each call once."""
    link = ScriptLink(_client(server, socket_timeout=2))
    count = link.script(COUNT)
    assert await count.many([(["n"], []), (["n"], []), (["m"], [])]) == [b"1", b"2", b"1"]
    assert len(_link_clients(server)) == 1  # all on one connection, kept for the next call
    server.client().script_flush()
    assert await count.many([(["n"], []), (["m"], [])]) == [b"3", b"2"]  # NOSCRIPT: each once
    picky = link.script(
        "if ARGV[1] == 'bad' then return redis.error_reply('bad one') end return ARGV[1]"
    )
    replies = await picky.many([([], ["a"]), ([], ["bad"]), ([], ["c"])])
    assert replies[0] == b"a" and replies[2] == b"c"
    assert isinstance(replies[1], ResponseError) and "bad one" in str(replies[1])
    assert await picky.many([]) == []
    assert await picky.many([([], ["alone"])]) == [b"alone"]  # one call: still a list
    assert await count(keys=["n"], args=[]) == b"4"  # the connection still in step
    await link.aclose()


async def test_a_script_error_is_a_redis_error_and_the_connection_stays(server):
    link = ScriptLink(_client(server, socket_timeout=2))
    broken = link.script("return redis.error_reply('LIMITS broken on purpose')")
    with pytest.raises(ResponseError, match="broken on purpose"):
        await broken(keys=[], args=[])
    assert await link.script(ECHO)(keys=[], args=["after"]) == b"after"
    assert len(_link_clients(server)) == 1
    await link.aclose()


async def test_a_stalled_server_times_out_and_its_late_answer_reaches_no_one(server):
    link = ScriptLink(_client(server, socket_timeout=0.5))
    echo = link.script(ECHO)
    assert await echo(keys=[], args=["warm"]) == b"warm"
    server.pause(1500)
    started = time.monotonic()
    with pytest.raises(RedisTimeoutError):
        await echo(keys=[], args=["late"])
    assert time.monotonic() - started < 1.2  # the link's timeout, not the pause
    await asyncio.sleep(1.3)  # the pause ends; "late" is answered on the closed connection
    assert await echo(keys=[], args=["fresh"]) == b"fresh"
    await link.aclose()


async def test_connections_lost_while_idle_are_passed_over_after_a_restart(server):
    link = ScriptLink(_client(server, socket_timeout=2))
    echo = link.script(ECHO)
    await asyncio.gather(*(echo(keys=[], args=[str(i)]) for i in range(5)))
    server.kill()
    server.start()  # the same port, empty: no scripts, no connections
    await asyncio.sleep(0.1)  # the old connections see their end
    assert await echo(keys=[], args=["first"]) == b"first"  # no error for the first caller
    await link.aclose()


async def test_a_stopped_server_is_a_connection_error(server):
    link = ScriptLink(_client(server, socket_timeout=1, socket_connect_timeout=1))
    server.kill()
    with pytest.raises(RedisConnectionError):
        await link.script(ECHO)(keys=[], args=["x"])
    assert link._open == 0  # the failed connect gave its place back


async def test_more_callers_than_connections_wait_for_one(server):
    link = ScriptLink(_client(server, socket_timeout=2, max_connections=4))
    count = link.script(COUNT)
    results = await asyncio.gather(
        *(count(keys=["burst"], args=[]) for _ in range(300)), return_exceptions=True
    )
    counts = [r for r in results if isinstance(r, bytes)]
    assert len(counts) == 300, [r for r in results if not isinstance(r, bytes)][:3]
    assert sorted(int(r) for r in counts) == list(range(1, 301))
    assert 1 <= len(_link_clients(server)) <= 4
    await link.aclose()


async def _one_warm_connection(server: OwnRedis, timeout: float, pause_ms: int):
    """A link with one connection, used once, then the server paused for `pause_ms`."""
    link = ScriptLink(_client(server, socket_timeout=timeout, max_connections=1))
    echo = link.script(ECHO)
    assert await echo(keys=[], args=["warm"]) == b"warm"
    server.pause(pause_ms)
    return link, echo


async def test_a_cancelled_call_closes_its_connection_and_frees_its_place(server):
    link, echo = await _one_warm_connection(server, 5, 800)
    stuck = asyncio.create_task(echo(keys=[], args=["cancelled"]))
    await asyncio.sleep(0.2)
    stuck.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck
    assert link._open == 0 and link._idle == []
    # The one place is free again: the next call opens a connection and gets its own answer.
    assert await echo(keys=[], args=["next"]) == b"next"
    await link.aclose()


async def test_a_caller_that_finds_no_free_connection_in_time_gets_a_redis_error(server):
    link, echo = await _one_warm_connection(server, 0.5, 1200)
    results = await asyncio.gather(
        echo(keys=[], args=["a"]), echo(keys=[], args=["b"]), return_exceptions=True
    )
    assert all(isinstance(r, RedisError) for r in results)
    await asyncio.sleep(1.0)
    assert await echo(keys=[], args=["after"]) == b"after"
    await link.aclose()
