"""An engine killed after it sent a stream's response head and before its first piece: the
caller has nothing yet (the gateway holds a stream's head until its first piece), so the
request moves to the other engine and is answered there in full, as one refused a connection
does. Before, the caller got the head and an error event.

The session's real engines: both engines' cores stopped (SIGSTOP) while their API servers run,
so an engine sends a stream's head and no piece; the engine the gateway chose (its log shows
the request's head) is killed (SIGKILL of its process group), the other's core goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.faults.record import FaultRecord, Stopwatch, wait_until
from tests.faults.test_engine_stalled import engine_core_pids
from tests.faults.test_engine_stalled_requests import (
    CLIENT_WAIT_S,
    Call,
    _events,
    _stream_lines,
    _tokens,
)
from tests.fixtures.gateway import running_gateway
from tests.gateway.hostile_support import PROMPT, clear_gateway_counts
from tests.gateway.test_hostile_engines import token

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
HEAD_WAIT_S = 30.0  # the bound on the wait for the engine's head (a loaded machine)


def _heads(handle) -> int:
    """Stream heads the engine has sent: uvicorn logs a request when its response starts."""
    log = Path(handle.process.config.log_path)
    return log.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')


def test_a_stream_whose_engine_dies_before_its_first_piece_moves_to_the_other_engine(
    worker_fleet, celery_worker_process, engine_control
):
    fleet = worker_fleet
    clear_gateway_counts()
    headers = {"authorization": f"Bearer {token(fleet.world, 'alice', fleet.world.acme)}"}
    handles = {"a": fleet.handle_a, "b": fleet.handle_b}
    paused = {name: engine_core_pids(h.process.pid) for name, h in handles.items()}
    assert all(paused.values()), f"no VLLM::EngineCore process in an engine's group: {paused}"
    before = {name: _heads(h) for name, h in handles.items()}
    body = {"model": "tiny-llama", "messages": PROMPT, "stream": True, "max_tokens": 4}

    def chosen() -> str | None:
        return next((n for n, h in handles.items() if _heads(h) > before[n]), None)

    with (
        running_gateway(celery_worker_process["queue"], GATEWAY_REFRESH_SECONDS="0") as gateway,
        httpx.Client(timeout=CLIENT_WAIT_S) as client,
    ):
        url = gateway + "/v1/chat/completions"
        for pid in (pid for pids in paused.values() for pid in pids):
            os.kill(pid, signal.SIGSTOP)
        try:
            call = Call(lambda: _events(_stream_lines(client, url, headers, body)))
            call.start()
            wait_until(chosen, timeout=HEAD_WAIT_S, what="an engine sent the stream's head")
            dead = chosen()
            assert dead is not None
            other = "b" if dead == "a" else "a"
            for pid in paused.pop(other):
                os.kill(pid, signal.SIGCONT)
            killed = Stopwatch()
            os.killpg(os.getpgid(handles[dead].process.pid), signal.SIGKILL)
            paused.pop(dead)  # its core went with the group
            call.join(CLIENT_WAIT_S + 5)
            moved_s = killed.elapsed()
        finally:
            for pid in (pid for pids in paused.values() for pid in pids):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
    engine_control.stop(handles[dead])  # reaps the killed group; started again after the test
    assert not call.is_alive(), "the stream did not end"
    assert call.error is None, repr(call.error)
    events = call.result
    # The caller got one whole answer from the other engine: pieces, no error event, [DONE].
    assert events[-1] == {"done": True}, events[-3:]
    assert not [e for e in events if "error" in e], events
    assert _tokens(events) > 0, events
    assert _heads(handles[other]) == before[other] + 1
    FaultRecord(
        fault="engine-killed-before-first-piece",
        title="An engine killed (SIGKILL) after it sent a stream's head, before its first piece",
        part="engine",
        caller_saw="the whole stream from the other engine (200, its pieces, [DONE]), "
        f"{moved_s:.1f} s after the kill; the gateway holds a stream's head until its first "
        "piece, so nothing had reached the caller",
        heal_s=None,
        lost="nothing: the request moved and was answered in full",
        test="tests/faults/test_engine_killed_before_first_piece.py::"
        "test_a_stream_whose_engine_dies_before_its_first_piece_moves_to_the_other_engine",
    ).write()
