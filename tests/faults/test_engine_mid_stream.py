"""An engine SIGKILLed in the middle of a stream through the gateway: the caller's stream ends
with an error event in OpenAI's streaming error shape (not a hang, not a silent cut), the usage
of that request is recorded (the tokens it delivered, as an error of the version), every count
it held (tenant, version, engine) is given back, and once the engine is back the beat's
reconcile makes the version resident again with no hand; the next request through the gateway
is served.

The session's real CPU engine A (B down), its worker, the session's gateway, a real beat.
"""

from __future__ import annotations

import datetime
import os
import signal

import httpx
import orjson
import pytest

from gateway.models import DailyUsage
from gateway.usage import usage_persist
from tests.faults.harness import chain_verifies, forget_other_tests_checkpoint, resident_on
from tests.faults.record import FaultRecord, Stopwatch, wait_until
from tests.gateway.hostile_support import (
    chat,
    one_engine_fixture,  # noqa: F401 - fixture
    redis_int,
)
from tests.gateway.test_hostile_engines import token
from tests.workers.fleet import servable_version
from workers import shared_state
from workers.controller import converge_engine
from workers.desired import set_desired

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
TOKENS_BEFORE_KILL = 5


def _data(line: str) -> bytes | None:
    return line[5:].strip().encode() if line.startswith("data:") else None


def test_an_engine_killed_mid_stream_ends_the_stream_with_an_error_event_and_frees_its_counts(
    one_engine, gateway_server, engine_control, celery_beat_process, tmp_path
):
    fleet = one_engine
    world = fleet.world
    forget_other_tests_checkpoint()
    version = servable_version(world.support, tmp_path, seed=811)
    set_desired(version=version, engine=fleet.a, state="registered", reason="t", converge=False)
    converge_engine(fleet.a)
    assert version.served_name in resident_on(fleet.handle_a)
    alice = token(world, "alice", world.acme)
    body = {
        "model": "support",
        "messages": [{"role": "user", "content": "Tell me about tea."}],
        "stream": True,
        "max_tokens": 900,
        "ignore_eos": True,
    }
    events: list[dict] = []
    seen_tokens = 0
    with httpx.stream(
        "POST",
        gateway_server + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {alice}"},
        timeout=httpx.Timeout(60.0),  # bounds a hung stream: that would be the failure
    ) as reply:
        assert reply.status_code == 200
        killed = False
        for line in reply.iter_lines():
            data = _data(line)
            if data is None:
                continue
            if data == b"[DONE]":
                events.append({"done": True})
                continue
            event = orjson.loads(data)
            events.append(event)
            if any((c.get("delta") or {}).get("content") for c in event.get("choices") or []):
                seen_tokens += 1
            if seen_tokens == TOKENS_BEFORE_KILL and not killed:
                process = fleet.handle_a.process.process
                assert process is not None
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                killed = True
    assert killed
    last = events[-1]
    # OpenAI's streaming error shape, last; no [DONE] after it.
    assert set(last) == {"error"}, last
    assert {"message", "type", "code"} <= set(last["error"]), last
    assert last["error"]["type"] == "server_error"
    assert {"done": True} not in events

    # Every count it held is given back.
    served = version.served_name
    wait_until(lambda: redis_int(f"lp:gw:tflight:{world.acme.id}") == 0, timeout=30, what="t")
    assert redis_int(f"lp:gw:conc:{served}") == 0
    assert served not in shared_state.inflight_counts(fleet.a.name)

    # Its usage: one request, the tokens it delivered, an error of the version.
    day = datetime.datetime.now(datetime.UTC).date()
    usage = f"{world.acme.id}|{version.id}|{world.acme.slo_class}"  # by its service class
    wait_until(
        lambda: redis_int(f"lp:usage:{day.isoformat()}", f"{usage}|requests") == 1,
        timeout=30,
        what="the request's usage",
    )
    delivered = redis_int(f"lp:usage:{day.isoformat()}", f"{usage}|out")
    label = f"support@{version.number}"
    assert redis_int("lp:gwm:counters", f"acme|support|{label}|errors") == 1
    usage_persist(days=1)
    row = DailyUsage.objects.get(tenant=world.acme, version=version, day=day)
    assert (row.requests, row.completion_tokens) == (1, delivered)
    assert delivered >= seen_tokens >= TOKENS_BEFORE_KILL

    # The engine comes back; the beat's reconcile makes the version resident again, no hand.
    ready_s = engine_control.start(fleet.handle_a)
    back = Stopwatch()
    wait_until(
        lambda: served in resident_on(fleet.handle_a),
        timeout=240,
        what="reconcile loads it on the restarted engine",
    )
    heal_s = back.elapsed()
    again = chat(gateway_server, alice, {"model": "support", "max_tokens": 4})
    assert again.status_code == 200, again.text
    assert chain_verifies()
    FaultRecord(
        fault="engine-killed-mid-stream",
        title="An engine SIGKILLed in the middle of a stream through the gateway",
        part="engine",
        caller_saw=f"{seen_tokens} tokens, then an error event "
        f"(`{last['error']['code']}`: {last['error']['message']}) and the stream's end; "
        "no hang, no [DONE]",
        heal_s=heal_s,
        lost=f"nothing: usage recorded (1 request, {delivered} tokens delivered, counted as an "
        "error); tenant, version and engine counts given back; the version resident again "
        f"after the restart (engine ready after {ready_s:.0f} s) by the beat's reconcile, "
        "the next request 200",
        test="tests/faults/test_engine_mid_stream.py::"
        "test_an_engine_killed_mid_stream_ends_the_stream_with_an_error_event_and_frees_its_counts",
    ).write()
