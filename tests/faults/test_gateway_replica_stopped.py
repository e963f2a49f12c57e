"""A gateway replica stopped in order (SIGTERM, as a rolling deploy or `make run`'s Ctrl-C does)
while it streams an answer: the caller gets the whole answer, the process ends its shutdown, and the
request's measurements reach Redis (its orderly stop flushes what the replica still holds).

The replica's measurement flush is set to a minute here, so only the stop itself can have sent
them: without the ASGI lifespan wired to `Gateway.aclose()` (uvicorn `--lifespan off`, as
before commit dbb6773) the request is lost from usage and latency.

The session's real CPU engine A (B down) and its worker; one gateway replica of the test's own.
"""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from tests.faults.record import FaultRecord
from tests.fixtures.gateway import gateway_log_tail, running_gateway_process
from tests.gateway.hostile_support import one_engine_fixture  # noqa: F401 - fixture
from tests.gateway.test_hostile_engines import _save, token
from workers import shared_state

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
MAX_TOKENS = 120


def _sums() -> dict[str, float]:
    """The replicas' counters summed over every tenant, adapter and version, by what they count."""
    sums: dict[str, float] = {}
    for field, value in shared_state.client().hgetall("lp:gwm:counters").items():
        name = field.decode() if isinstance(field, bytes) else field
        what = name.rsplit("|", 1)[-1]
        sums[what] = sums.get(what, 0.0) + float(value)
    return sums


def test_a_replica_stopped_in_order_finishes_its_stream_and_sends_its_measurements(
    one_engine, celery_worker_process
):
    world = one_engine.world
    _save(world.acme, quota_requests_per_minute=100_000)
    alice = token(world, "alice", world.acme)
    env = {"GATEWAY_REFRESH_SECONDS": "0", "GATEWAY_MEASUREMENT_FLUSH_SECONDS": "60"}
    before = _sums()
    with running_gateway_process(celery_worker_process["queue"], **env) as (base, proc):
        events: list[str] = []
        with httpx.stream(
            "POST",
            base + "/v1/chat/completions",
            json={
                "model": "tiny-llama",
                "messages": [{"role": "user", "content": "Tell me about tea."}],
                "stream": True,
                "max_tokens": MAX_TOKENS,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            },
            headers={"authorization": f"Bearer {alice}"},
            timeout=120,
        ) as reply:
            assert reply.status_code == 200, reply.read()
            for line in reply.iter_lines():
                if not line.startswith("data:"):
                    continue
                events.append(line)
                if len(events) == 1:
                    os.killpg(proc.pid, signal.SIGTERM)  # mid-stream: the replica is told to go
        code = proc.wait(timeout=60)
        log = gateway_log_tail(base)

    assert events[-1] == "data: [DONE]", events[-3:]  # the whole answer, after the SIGTERM
    assert f'"completion_tokens":{MAX_TOKENS}' in events[-2], events[-2]
    # An orderly end: uvicorn finished its shutdown, then raised the SIGTERM it had caught
    # again (uvicorn.Server.capture_signals), so the exit is the signal's own.
    assert code == -signal.SIGTERM, log
    after = _sums()
    assert after.get("requests", 0) - before.get("requests", 0) == 1, log
    assert after.get("tokens_out", 0) - before.get("tokens_out", 0) == MAX_TOKENS, log
    assert "Application shutdown complete" in log, log

    FaultRecord(
        fault="gateway-replica-stopped",
        title="A gateway replica stopped in order (SIGTERM) in the middle of a stream",
        part="gateway",
        caller_saw=f"its whole answer ({MAX_TOKENS} tokens, then [DONE]); the replica ended "
        "its shutdown once the stream had ended",
        heal_s=None,
        lost="nothing: the request's measurements (count, tokens, latency) were sent to Redis by "
        "the replica's orderly stop (its periodic flush set to a minute here)",
        test="tests/faults/test_gateway_replica_stopped.py::"
        "test_a_replica_stopped_in_order_finishes_its_stream_and_sends_its_measurements",
    ).write()
