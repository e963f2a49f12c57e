"""Spans recorded as plain tuples on a hot path, exported over OTLP by a process of their own.

The gateway's event loop records a sampled request's spans as tuples (gateway.tracing) and hands
them to a `SpanPipe`, which marshals them at once (the tuples die with the request: held for the
next write, they aged into the garbage collector's older generations, whose collections then
cost the gateway more than the spans' recording did); every few milliseconds the loop writes
what it holds to the pipe of a child process (`python -m core.span_export SERVICE SCOPE`) with
one non-blocking write. The child writes each span tuple as OTLP protobuf directly
(core.otlp_wire: no SDK span or protobuf objects), queues and batches them by the batch
processor's rules and variables (`OTEL_BSP_*`) and sends each batch with the SDK's OTLP/HTTP
exporter's client, configured by the standard variables it inherits (`OTEL_EXPORTER_OTLP_*`,
`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`). The encoding, the bulk of tracing's CPU, thus
never holds the serving process's GIL.

Back pressure: when the child does not keep up, the pipe fills and the loop keeps at most
`MAX_BUFFERED_BYTES` of its own; beyond that, spans are dropped (counted), never requests
delayed. The child exits, after exporting what it holds, when the pipe closes (its parent ended,
whichever way); it ignores SIGINT and SIGTERM, which its process group receives at a stop.

A record: (trace_id, wall_ns, perf, [span tuples]), its times told on the recording process's
perf_counter: `perf` read at the Unix time `wall_ns`. A span tuple: (span_id, parent_span_id or 0,
name, kind (opentelemetry.trace.SpanKind's value), start, end, attributes, events [(name, time,
attributes)], links [(trace_id, span_id, trace_flags, attributes)], error (bool)), its times
perf_counter values (seconds).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import errno
import logging
import marshal
import os
import signal
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[1]
FRAME = struct.Struct("<I")
FLUSH_DELAY_S = 0.02  # the loop writes what it holds at most this often
MAX_BUFFERED_BYTES = 4 << 20  # beyond the pipe's own buffer; more is dropped

Record = tuple[int, int, float, list[tuple[Any, ...]]]


class SpanPipe:
    """The recording side: one child exporter per process (a forked child starts its own)."""

    def __init__(self, service_name: str, scope_name: str) -> None:
        self.service_name, self.scope_name = service_name, scope_name
        self.pid = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.fd = -1
        self.unsent = bytearray()  # framed bytes the pipe did not take yet
        self.scheduled: Any = None  # the loop a flush is due on
        self.lock = threading.Lock()  # loops of several threads may share the pipe
        self.dropped = 0  # records dropped for a full buffer, or an exporter gone

    def ensure(self) -> None:
        """The exporter started, in this process (one compare once it is)."""
        if self.pid == os.getpid():
            return
        self.pid = os.getpid()
        self.unsent, self.scheduled = bytearray(), None
        self.lock = threading.Lock()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "core.span_export", self.service_name, self.scope_name],
                stdin=subprocess.PIPE,
                cwd=REPO,
                close_fds=True,
            )
        except OSError:
            log.exception("tracing: could not start the span exporter; spans are dropped")
            self.proc, self.fd = None, -1
            return
        assert self.proc.stdin is not None
        self.fd = self.proc.stdin.fileno()
        os.set_blocking(self.fd, False)
        atexit.register(self.close)

    def put(self, record: Record) -> None:
        """One request's spans, marshalled now (their tuples and dicts die with the request,
        never aging into the collector's older generations while they wait); the main thread's
        running loop (the server's) writes them within FLUSH_DELAY_S. Without a loop, or on
        another thread's loop (an eval run's, which may end before a timer of its own fires),
        they are written now."""
        body = marshal.dumps((record,))
        with self.lock:
            if self.fd < 0 or len(self.unsent) + len(body) > MAX_BUFFERED_BYTES:
                self.dropped += 1
                return
            self.unsent += FRAME.pack(len(body))
            self.unsent += body
        if threading.current_thread() is not threading.main_thread():
            self.flush()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        due = self.scheduled
        if due is loop:
            return
        if due is not None:
            self.flush()
        self.scheduled = loop
        loop.call_later(FLUSH_DELAY_S, self.flush)

    def flush(self) -> None:
        """Write what is held, as much of it as the pipe takes; what it did not take, the next
        flush writes (one is scheduled while bytes wait)."""
        with self.lock:
            self.scheduled = None
            if self.fd < 0:
                return
            self._write()
            if not self.unsent:
                return
            try:  # the pipe is full: try again shortly
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop: the next put or the process's end writes it
            if threading.current_thread() is not threading.main_thread():
                return  # a loop that may end: the next put or the process's end writes it
            self.scheduled = loop
            loop.call_later(FLUSH_DELAY_S, self.flush)

    def _write(self) -> None:
        while self.unsent:
            try:
                written = os.write(self.fd, self.unsent)
            except BlockingIOError:
                return
            except OSError as exc:  # the exporter is gone: nothing more to send
                if exc.errno not in (errno.EPIPE, errno.EBADF):
                    log.warning("tracing: span exporter pipe: %s", exc)
                self._gone()
                return
            del self.unsent[:written]

    def _gone(self) -> None:
        log.warning("tracing: the span exporter has exited; spans are dropped")
        self.fd = -1
        self.unsent.clear()

    def close(self) -> None:
        """Send what is held (blocking: the process is ending) and close the pipe; the exporter
        exports the rest and exits."""
        if self.pid != os.getpid() or self.proc is None or self.proc.stdin is None:
            return
        if self.fd >= 0:
            with self.lock:
                os.set_blocking(self.fd, True)
            self.flush()
            self.fd = -1
        with contextlib.suppress(OSError):
            self.proc.stdin.close()


def readable_spans(record: Record, resource: Any, scope: Any) -> list[Any]:
    """One record's spans as the SDK's ReadableSpan: what its processors and exporters take, and
    what core.otlp_wire's encoding is checked against (the SDK's encoding of these)."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

    from core.otlp_wire import unix_ns

    sampled = TraceFlags(TraceFlags.SAMPLED)
    trace_id, wall_ns, perf, spans = record
    out = []
    for span_id, parent_id, name, kind, start, end, attributes, events, links, error in spans:
        out.append(
            ReadableSpan(
                name=name,
                context=SpanContext(trace_id, span_id, False, sampled),
                parent=SpanContext(trace_id, parent_id, False, sampled) if parent_id else None,
                resource=resource,
                attributes=attributes,
                events=[Event(n, a, timestamp=unix_ns(wall_ns, perf, t)) for n, t, a in events],
                links=[Link(SpanContext(t, s, True, TraceFlags(f)), a) for t, s, f, a in links],
                kind=SpanKind(kind),
                status=Status(StatusCode.ERROR) if error else Status(StatusCode.UNSET),
                start_time=unix_ns(wall_ns, perf, start),
                end_time=unix_ns(wall_ns, perf, end),
                instrumentation_scope=scope,
            )
        )
    return out


class Batches:
    """Encoded spans waiting for export, sent in batches by a thread of their own (the batch
    processor's rules and variables: OTEL_BSP_MAX_QUEUE_SIZE spans held at most, the rest
    dropped; a batch of OTEL_BSP_MAX_EXPORT_BATCH_SIZE as soon as there is one, else what is
    held every OTEL_BSP_SCHEDULE_DELAY ms)."""

    def __init__(self, send: Any, *, max_queue: int, batch: int, delay_s: float) -> None:
        self.send, self.max_queue, self.batch, self.delay_s = send, max_queue, batch, delay_s
        self.spans: collections.deque[bytes] = collections.deque()
        self.ready = threading.Condition()
        self.closing = False
        self.dropped = 0
        self.thread = threading.Thread(target=self._run, name="span-export", daemon=True)

    def take(self, record: Record, encode: Any) -> None:
        """One record's spans, encoded by `encode`, when all of them fit in the queue; else
        they are dropped whole (a trace is not cut in parts)."""
        count = len(record[3])
        if self.max_queue - len(self.spans) < count:  # only the thread shrinks it
            if not self.dropped:
                log.warning("tracing: the span export queue is full; spans are dropped")
            self.dropped += count
            return
        encoded = encode(record)
        with self.ready:
            self.spans.extend(encoded)
            if len(self.spans) >= self.batch:
                self.ready.notify()

    def close(self) -> None:
        """Send everything held, then end the thread."""
        with self.ready:
            self.closing = True
            self.ready.notify()
        self.thread.join()

    def _run(self) -> None:
        spans = self.spans
        while True:
            with self.ready:
                if not self.closing and len(spans) < self.batch:
                    self.ready.wait(self.delay_s)
                batch = [spans.popleft() for _ in range(min(self.batch, len(spans)))]
                last = self.closing and not spans
            if batch:
                try:
                    self.send(batch)
                except Exception:  # an export's failure costs its spans, never the exporter
                    log.exception("tracing: span export failed")
            if last:
                return


def main(service_name: str, scope_name: str) -> None:
    """The exporter process: frames from stdin until it closes, then the rest exported. Each
    span tuple is written as OTLP protobuf directly (core.otlp_wire) and sent by the SDK's
    OTLP/HTTP exporter's client (its endpoint, headers, compression, timeout and retries from
    the OTEL_EXPORTER_OTLP_* variables)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from core.otlp_wire import Encoder

    resource = Resource.create({"service.name": service_name}).merge(
        OTELResourceDetector().detect()
    )
    encoder = Encoder(
        dict(resource.attributes), scope_name, resource_schema_url=resource.schema_url
    )
    exporter = OTLPSpanExporter()

    def send(batch: list[bytes]) -> None:
        # The exporter's own client: what its export() does once the SDK's encoding is done.
        result = exporter._client.export(encoder.request(batch))  # noqa: SLF001
        if not result.success:
            log.warning("tracing: %d spans not exported (%s)", len(batch), result.status_code)

    batches = Batches(
        send,
        max_queue=BatchSpanProcessor._default_max_queue_size(),  # noqa: SLF001 - the env rule
        batch=BatchSpanProcessor._default_max_export_batch_size(),  # noqa: SLF001
        delay_s=BatchSpanProcessor._default_schedule_delay_millis() / 1000,  # noqa: SLF001
    )
    batches.thread.start()
    stream = sys.stdin.buffer
    try:
        while True:
            head = stream.read(FRAME.size)
            if len(head) < FRAME.size:
                break
            body = stream.read(FRAME.unpack(head)[0])
            # Only its parent writes this pipe (its stdin): marshal's input is trusted here.
            for record in marshal.loads(body):  # noqa: S302
                batches.take(record, encoder.record)
    finally:
        batches.close()
        exporter.shutdown()
        if batches.dropped:
            log.warning("tracing: %d spans dropped for a full export queue", batches.dropped)


if __name__ == "__main__":
    main(*sys.argv[1:3])
