"""Requests already on an engine whose core stalls: once the prober marks the engine down, the
gateway stops waiting on it. A request that has sent its caller nothing (a whole answer, or a
stream before its first piece) moves to the other engine and is answered there; a stream under
way ends with an error event. Before, each waited out its whole time budget (120 s here).

The session's real engines: A's engine core process stopped (SIGSTOP) while its API server
runs; B drained while the requests are sent (so they land on A), up again before the probe.
A gateway of the test's own (the default 120 s budget), the real worker behind it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from tests.faults.record import FaultRecord, Stopwatch
from tests.faults.test_engine_stalled import engine_core_pids, stopped
from tests.fixtures.gateway import running_gateway
from tests.gateway.hostile_support import PROMPT, clear_gateway_counts, engine_counter
from tests.gateway.test_hostile_engines import token
from workers.models import EngineState
from workers.services.engines import engines_probe_all

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
PROGRESS_WAIT_S = 3.0  # the prober's ENGINE_PROGRESS_TIMEOUT_SECONDS here
BUDGET_S = 120.0  # the gateway's time budget: what each request waited before
CLIENT_WAIT_S = 60.0  # the callers' own read timeout: waiting out the budget fails the test


class Call(threading.Thread):
    """One request in a thread of its own; what it got, or what it raised."""

    def __init__(self, go: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.go = go
        self.result: Any = None
        self.error: BaseException | None = None
        self.took_s = 0.0

    def run(self) -> None:
        watch = Stopwatch()
        try:
            self.result = self.go()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        self.took_s = watch.elapsed()


def _events(lines) -> list[dict]:
    events = []
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        events.append({"done": True} if data == "[DONE]" else orjson.loads(data))
    return events


def _tokens(events: list[dict]) -> int:
    return sum(
        1 for e in events for c in e.get("choices") or [] if (c.get("delta") or {}).get("content")
    )


def _set_state(engine, state: str) -> None:
    engine.state = state
    engine.save()  # a save: the gateway's tables follow saves


def test_requests_on_an_engine_whose_core_stalls_move_or_end_once_it_is_marked_down(
    worker_fleet, celery_worker_process, settings
):
    settings.ENGINE_PROGRESS_TIMEOUT_SECONDS = PROGRESS_WAIT_S
    fleet = worker_fleet
    clear_gateway_counts()
    alice = token(fleet.world, "alice", fleet.world.acme)
    headers = {"authorization": f"Bearer {alice}"}
    cores = engine_core_pids(fleet.handle_a.process.pid)
    assert cores, "no VLLM::EngineCore process in engine A's group"
    _set_state(fleet.b, EngineState.DRAINING)  # every request below goes to A
    with running_gateway(
        celery_worker_process["queue"],
        GATEWAY_REFRESH_SECONDS="0",
        GATEWAY_REQUEST_TIMEOUT_SECONDS=str(BUDGET_S),
    ) as gateway:
        url = gateway + "/v1/chat/completions"
        b_done = engine_counter(fleet.handle_b, "vllm:request_success_total")
        with httpx.Client(timeout=CLIENT_WAIT_S) as client:
            # A stream under way on A: a few tokens read, then A's core stops.
            long_stream = {
                "model": "tiny-llama",
                "messages": PROMPT,
                "stream": True,
                "max_tokens": 900,
                "ignore_eos": True,
            }
            for _attempt in range(3):
                with client.stream("POST", url, json=long_stream, headers=headers) as under_way:
                    assert under_way.status_code == 200
                    lines = under_way.iter_lines()
                    seen: list[str] = []
                    while _tokens(_events(seen)) < 3:
                        seen.append(next(lines))
                    with stopped(cores):
                        rest = Call(lambda: list(lines))
                        rest.start()
                        # A busy reader can fall so far behind that the engine had sent the
                        # whole stream before its core stopped: then there is nothing under
                        # way to end, and the stream is tried again.
                        rest.join(2.0)
                        if _ran_to_its_end(rest):
                            continue
                        # Sent to A while its core is stopped: a whole answer and a stream.
                        whole = Call(
                            lambda: client.post(
                                url,
                                json={"model": "tiny-llama", "messages": PROMPT, "max_tokens": 4},
                                headers=headers,
                            )
                        )
                        fresh_stream = Call(
                            lambda: _events(
                                _stream_lines(
                                    client, url, headers, {**long_stream, "max_tokens": 4}
                                )
                            )
                        )
                        for call in (whole, fresh_stream):
                            call.start()
                        time.sleep(2.0)  # on A, waiting
                        assert rest.is_alive(), (
                            rest.error,
                            _events(seen + (rest.result or []))[-3:],
                        )
                        assert whole.is_alive() and fresh_stream.is_alive()
                        _set_state(fleet.b, EngineState.UP)
                        marked = Stopwatch()
                        verdicts = engines_probe_all()
                        assert verdicts[fleet.a.name].startswith("engine.stalled"), verdicts
                        assert verdicts[fleet.b.name] == "up", verdicts
                        for call in (whole, fresh_stream, rest):
                            call.join(CLIENT_WAIT_S + 5)
                        after_mark_s = marked.elapsed()
                break
            else:
                pytest.fail(
                    "the engine finished the long stream before its core stopped, three times"
                )
    for call in (whole, fresh_stream, rest):
        assert call.error is None, repr(call.error)
    # Nothing had reached their callers: both moved to B and were answered in full.
    assert whole.result.status_code == 200, whole.result.text
    assert whole.result.json()["choices"][0]["message"]["content"]
    assert fresh_stream.result[-1] == {"done": True}, fresh_stream.result[-3:]
    assert _tokens(fresh_stream.result) > 0
    # The two moved, and the prober's one-token request.
    assert engine_counter(fleet.handle_b, "vllm:request_success_total") - b_done == 3
    # The stream under way ends with an error event in OpenAI's shape, no [DONE].
    events = _events(seen + rest.result)
    assert {"done": True} not in events
    assert set(events[-1]) == {"error"}, events[-1]
    assert events[-1]["error"]["code"] == "engine_down"
    assert events[-1]["error"]["type"] == "server_error"
    FaultRecord(
        fault="engine-core-stalled-under-requests",
        title="An engine's core stopped (SIGSTOP of its EngineCore process) with requests on it",
        part="engine",
        caller_saw=f"{max(whole.took_s, fresh_stream.took_s):.1f} s at most for the requests "
        "that had nothing yet (a whole answer, a stream before its first token): moved to the "
        "other engine once the prober marked the stalled one down, answered 200 in full; a "
        f"stream under way: {_tokens(_events(seen))} tokens, then an error event "
        "(`engine_down`) and its end. All done "
        f"{after_mark_s:.1f} s after the prober began (its progress wait {PROGRESS_WAIT_S:g} s); "
        f"before, each waited out its {BUDGET_S:g} s budget",
        heal_s=None,
        lost="nothing: the moved requests answered in full on the other engine",
        test="tests/faults/test_engine_stalled_requests.py::"
        "test_requests_on_an_engine_whose_core_stalls_move_or_end_once_it_is_marked_down",
    ).write()


def _ran_to_its_end(rest: Call) -> bool:
    """Whether the stream read in `rest` had ended normally ([DONE]) before its core stopped."""
    return not rest.is_alive() and rest.error is None and "data: [DONE]" in (rest.result or [])


def _stream_lines(client: httpx.Client, url: str, headers: dict, body: dict) -> list[str]:
    with client.stream("POST", url, json=body, headers=headers) as reply:
        assert reply.status_code == 200, reply.read()
        return list(reply.iter_lines())
