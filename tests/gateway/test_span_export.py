"""The gateway's span exporter process (core.span_export): span tuples written to its pipe are
exported over OTLP by the SDK in the child and read back from a real OTLP receiver; it sends what
it holds and exits when the pipe closes; a killed exporter costs spans, never an error in the
process that records them."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest

from core.span_export import SpanPipe

TRACE = int("4bf92f3577b34da6a3ce929d0e0e4736", 16)


def record(name: str) -> tuple[int, list[tuple]]:
    """A request span with one client child: attributes, an event, a link, an error status."""
    root, call = 0x1111, 0x2222
    return (
        TRACE,
        [
            (call, root, f"chat {name}", 2, 1_000, 2_000, {"n": 3}, [("first", 1_500, {})], (), 0),
            (
                root,
                0,
                name,
                1,
                500,
                2_500,
                {"lora_portal.tenant": "acme", "ok": False, "ms": 1.5},
                [],
                [(0xAB, 0xCD, 1, {"lora_portal.link": "caller"})],
                True,
            ),
        ],
    )


@pytest.fixture
def pipe(otlp_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "span-export-test")
    made = SpanPipe("lora-portal", "lora_portal")
    made.ensure()
    yield made
    made.close()
    if made.proc is not None:
        made.proc.wait(timeout=30)


def of(spans: list[dict], name: str) -> list[dict]:
    return [s for s in spans if name in (s["name"], s["name"].removeprefix("chat "))]


def test_spans_written_on_a_loop_reach_the_receiver_whole(pipe, otlp_receiver):
    name = f"req-{uuid.uuid4().hex[:8]}"

    async def serve() -> None:  # the server's loop: the pipe is written by its timer
        pipe.put(record(name))
        await asyncio.sleep(0.2)

    asyncio.run(serve())
    spans = otlp_receiver.wait_for(lambda spans: len(of(spans, name)) == 2)
    by_name = {s["name"]: s for s in of(spans, name)}
    root, call = by_name[name], by_name[f"chat {name}"]
    assert root["service"] == "span-export-test"  # the environment's resource
    assert root["scope"] == "lora_portal"
    assert (root["trace_id"], root["span_id"], root["parent_span_id"]) == (
        f"{TRACE:032x}",
        f"{0x1111:016x}",
        "",
    )
    assert (root["kind"], root["start_ns"], root["end_ns"], root["status"]) == (2, 500, 2500, 2)
    assert root["attributes"] == {"lora_portal.tenant": "acme", "ok": False, "ms": 1.5}
    assert root["links"] == [
        {
            "trace_id": f"{0xAB:032x}",
            "span_id": f"{0xCD:016x}",
            "attributes": {"lora_portal.link": "caller"},
        }
    ]
    assert call["parent_span_id"] == root["span_id"] and call["kind"] == 3
    assert call["events"] == [{"name": "first", "time_ns": 1500}]
    assert call["status"] == 0


def test_the_exporter_sends_what_it_holds_and_exits_when_the_pipe_closes(pipe, otlp_receiver):
    names = [f"end-{uuid.uuid4().hex[:8]}-{i}" for i in range(50)]
    for name in names:  # no loop: each written at once
        pipe.put(record(name))
    pipe.close()
    assert pipe.proc is not None and pipe.proc.wait(timeout=30) == 0
    spans = otlp_receiver.wait_for(lambda spans: all(len(of(spans, n)) == 2 for n in names))
    assert len([s for s in spans if s["name"] in names]) == len(names)


def test_a_killed_exporter_drops_spans_and_raises_nothing(pipe):
    assert pipe.proc is not None
    os.kill(pipe.proc.pid, signal.SIGKILL)
    pipe.proc.wait(timeout=10)
    for i in range(3):
        pipe.put(record(f"lost-{i}"))  # the first write finds the pipe closed
    assert pipe.fd == -1
    assert pipe.dropped >= 2
