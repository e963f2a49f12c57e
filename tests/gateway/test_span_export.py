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
WALL, PERF = 10**18, 1000.0


def at(ns: int) -> float:
    """The perf clock's reading `ns` after WALL."""
    return PERF + ns / 1e9


def record(name: str) -> tuple[int, int, float, list[tuple]]:
    """A request span with one client child: attributes, an event, a link, an error status;
    times on a perf clock read 1000.0 s at the Unix time 10**18 ns."""
    root, call = 0x1111, 0x2222
    return (
        TRACE,
        WALL,
        PERF,
        [
            (
                call,
                root,
                f"chat {name}",
                2,
                at(1_000),
                at(2_000),
                {"n": 3},
                [("first", at(1_500), {})],
                (),
                0,
            ),
            (
                root,
                0,
                name,
                1,
                at(500),
                at(2_500),
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
    assert (root["kind"], root["start_ns"], root["end_ns"], root["status"]) == (
        2,
        WALL + 500,
        WALL + 2500,
        2,
    )
    assert root["attributes"] == {"lora_portal.tenant": "acme", "ok": False, "ms": 1.5}
    assert root["links"] == [
        {
            "trace_id": f"{0xAB:032x}",
            "span_id": f"{0xCD:016x}",
            "attributes": {"lora_portal.link": "caller"},
        }
    ]
    assert call["parent_span_id"] == root["span_id"] and call["kind"] == 3
    assert call["events"] == [{"name": "first", "time_ns": WALL + 1500}]
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


def test_the_wire_encoding_is_the_sdks_encoding_of_the_same_spans():
    """core.otlp_wire's request, parsed back, equals the SDK's encoding of the record's spans
    made ReadableSpans: every field, the resource and the scope (twice: the second from the
    attributes' cache)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from core.otlp_wire import Encoder
    from core.span_export import readable_spans

    resource = Resource.create({"service.name": "wire-test", "deployment.slot": 2})
    scope = InstrumentationScope("lora_portal")
    trace_id, wall, perf, spans = record("wire")
    odd = {"negative": -7, "large": 2**40, "list": ["a", "b"], "flag": True, "text": "thé"}
    spans = [
        *spans,
        (0x3333, 0x1111, "odd", 0, at(600), at(900), odd, [("e", at(700), {"k": "v"})], (), 0),
    ]
    wanted = encode_spans(readable_spans((trace_id, wall, perf, spans), resource, scope))
    encoder = Encoder(dict(resource.attributes), "lora_portal")
    for _ in range(2):
        got = ExportTraceServiceRequest.FromString(
            encoder.request(encoder.record((trace_id, wall, perf, spans)))
        )
        assert got == wanted
    assert len(got.resource_spans[0].scope_spans[0].spans) == 3


def test_a_full_export_queue_drops_whole_traces_and_sends_the_rest():
    """The exporter's queue (OTEL_BSP_MAX_QUEUE_SIZE spans): a trace that does not fit is
    dropped whole and counted; what it holds is sent in batches of at most the batch size."""
    from core.span_export import Batches

    sent: list[list[bytes]] = []
    batches = Batches(sent.append, max_queue=3, batch=2, delay_s=60)  # its thread not started
    encode = lambda rec: [bytes([n]) for n in range(len(rec[3]))]  # noqa: E731
    batches.take((1, 0, 0.0, [(), ()]), encode)
    batches.take((2, 0, 0.0, [(), ()]), encode)  # 2 spans, room for 1: dropped whole
    batches.take((3, 0, 0.0, [()]), encode)
    assert batches.dropped == 2
    batches.thread.start()
    batches.close()
    assert sent == [[b"\x00", b"\x01"], [b"\x00"]]
