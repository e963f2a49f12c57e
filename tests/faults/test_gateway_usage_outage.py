"""Measurements (and the usage they become) through a Redis outage: a flush Redis did not
confirm is kept and sent again, and counted once: nothing lost or doubled.

Before, the recorder dropped a batch whose flush failed: requests served in the second before
Redis went were missing from the metrics and the usage totals (this test: 1 request of 2 across
the stall). A gateway that stopped waiting cannot know whether Redis ran the batch, so a plain
retry could count it twice: each batch writes a marker in the same transaction, and a retry first
looks for it.

A Redis server of the suite's own; the gateway's own Recorder, as its flusher calls it.
"""

from __future__ import annotations

import asyncio
import time

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from gateway.recorder import Measurement, Recorder
from tests.faults.record import FaultRecord, Stopwatch
from tests.faults.redis_server import OwnRedis


def _served(at: float, tokens: int = 7) -> Measurement:
    return Measurement(
        tenant="acme",
        tenant_id=5,
        adapter="support",
        version="support@1",
        version_id=11,
        pool="",
        served_name="acme--support--v1",
        engine="a",
        served_from="gpu",
        ok=True,
        ttft_ms=12.0,
        e2e_ms=30.0,
        prompt_tokens=3,
        completion_tokens=tokens,
        at=at,
    )


def _usage(server: OwnRedis, at: float) -> tuple[int, int]:
    # The day of the measurements, as the recorder keys it (a run that crosses midnight UTC
    # must not look in the next day's hash: CI did, once).
    day = time.strftime("%Y-%m-%d", time.gmtime(at))
    row = server.client().hgetall(f"lp:usage:{day}")
    return int(row.get(b"5|11|requests", 0)), int(row.get(b"5|11|out", 0))


async def _flush(recorder: Recorder) -> str:
    try:
        await recorder.flush()
    except RedisError as exc:
        return type(exc).__name__
    return "ok"


def test_measurements_outlive_a_redis_outage_and_count_once(own_redis):
    async def go() -> dict[str, object]:
        client = aioredis.Redis.from_url(own_redis.url, socket_timeout=0.5)
        recorder = Recorder(client)
        now = time.time()
        recorder.add(_served(now))
        seen: dict[str, object] = {"before": await _flush(recorder)}
        # A stall: the batch is sent, the gateway stops waiting, the server runs it afterwards.
        own_redis.pause(2000)
        recorder.add(_served(now, tokens=11))
        seen["stalled"] = await _flush(recorder)
        await asyncio.sleep(2.5)  # the pause is over: Redis ran the stalled batch by now
        seen["after the stall"] = await _flush(recorder)  # its marker is there: not again
        seen["usage after the stall"] = _usage(own_redis, now)
        # Away: nothing reaches Redis; the batch waits in the gateway.
        own_redis.kill()
        recorder.add(_served(now, tokens=13))
        seen["away"] = await _flush(recorder)
        port = own_redis.port
        own_redis.start()  # back (empty: no persistence), on the same port
        assert own_redis.port == port
        watch = Stopwatch()
        seen["back"] = await _flush(recorder)
        seen["heal_s"] = watch.elapsed()
        seen["usage after the restart"] = _usage(own_redis, now)
        await client.aclose()
        return seen

    seen = asyncio.run(go())
    assert seen["before"] == "ok" and seen["stalled"] != "ok" and seen["away"] != "ok"
    # The stalled batch counted once: 2 requests, 7 + 11 tokens (the old recorder: 1 and 7).
    assert seen["usage after the stall"] == (2, 18)
    # What was served while Redis was away arrived when it came back (it came back empty).
    assert seen["back"] == "ok" and seen["usage after the restart"] == (1, 13)
    FaultRecord(
        fault="gateway-usage-outage",
        title="Redis stalled 2 s (CLIENT PAUSE) during the gateway's measurement flush, then "
        "killed and restarted empty with a batch unsent",
        part="gateway",
        caller_saw="nothing: measurements are flushed once a second in the background",
        heal_s=float(seen["heal_s"]),  # type: ignore[arg-type]
        lost="nothing the gateway measured: the batch Redis did not confirm was sent again and "
        "counted once (its marker), the one from the outage arrived when Redis came back (was: "
        "dropped); what an empty Redis lost is Redis's (no persistence here)",
        test="tests/faults/test_gateway_usage_outage.py::"
        "test_measurements_outlive_a_redis_outage_and_count_once",
    ).write()
