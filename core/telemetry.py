"""OpenTelemetry for every process of the portal: configured the standard way, off when unset.

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
(and `OTEL_SDK_DISABLED` is not `true`), as declared in portal/settings.py. Everything else is
the SDK's own environment handling:
the sampler (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`; parent-based always-on by
default), the exporter's protocol, headers and timeouts (`OTEL_EXPORTER_OTLP_*`), the resource
(`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) and the batch processor's queue
(`OTEL_BSP_*`). Spans leave through a BatchSpanProcessor: export never sits on a request's path.

Off, nothing is installed: `tracer()` is None and the callers' spans are one `is None` test.
"""

from __future__ import annotations

import logging
import threading
from contextlib import nullcontext
from typing import Any

log = logging.getLogger(__name__)
INSTRUMENTATION_NAME = "lora_portal"

_lock = threading.Lock()
_tracer: Any = None  # opentelemetry.trace.Tracer once configured, else None
_provider: Any = None
_root_sampler: Any = None  # the environment's sampler, as configured
_pipe: Any = None  # core.span_export.SpanPipe: the hot path's spans, exported by a child


def tracing_wanted() -> bool:
    """Whether the settings ask for traces (an OTLP endpoint, the SDK not disabled)."""
    from django.conf import settings

    if settings.OTEL_SDK_DISABLED:
        return False
    return bool(settings.OTEL_EXPORTER_OTLP_ENDPOINT or settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)


def tracer() -> Any:
    """The portal's tracer, or None while tracing is off."""
    return _tracer


def configure(service_name: str, *, instrument: bool = True) -> Any:
    """Set up tracing for this process once (a forked child keeps it: the batch processor
    restarts its thread after a fork): the SDK's provider with the
    environment's sampler and resource, OTLP over HTTP through a batch processor, and (with
    `instrument`) the official instrumentations of Django, Celery, psycopg and Redis. Returns
    the tracer, or None when the environment does not ask for traces."""
    global _tracer, _provider, _root_sampler, _pipe
    if not tracing_wanted():
        return None
    with _lock:
        if _tracer is not None:
            return _tracer
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the process's own name.
        resource = Resource.create({"service.name": service_name}).merge(
            OTELResourceDetector().detect()
        )
        from opentelemetry.sdk.trace import sampling

        from core.span_export import SpanPipe

        _root_sampler = sampling._get_from_env_or_default()  # noqa: SLF001 - the SDK's env rule
        _pipe = SpanPipe(service_name, INSTRUMENTATION_NAME)
        provider = TracerProvider(resource=resource, sampler=_sampler(_root_sampler))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _provider = provider
        _tracer = provider.get_tracer(INSTRUMENTATION_NAME)
        if instrument:
            _instrument()
        log.info("tracing on: %s", service_name)
        return _tracer


def root_sampler() -> Any:
    """The environment's sampler (OTEL_TRACES_SAMPLER, parent-based always-on by default): what
    decides a root span's sampling, e.g. the gateway's request span (gateway.tracing). None
    while tracing is off."""
    return _root_sampler


def span_pipe() -> Any:
    """Where a hot path's spans recorded as tuples go (core.span_export.SpanPipe: exported by a
    child process, off this one's GIL); None while tracing is off."""
    return _pipe


def _sampler(configured: Any) -> Any:
    """The environment's sampler, less the database and Redis calls made outside any request or
    task (a background loop's every round would otherwise be a trace of its own)."""
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.trace import SpanKind, get_current_span

    class NoOrphanCalls(sampling.Sampler):
        def should_sample(
            self,
            parent_context: Any,
            trace_id: int,
            name: str,
            kind: Any = None,
            attributes: Any = None,
            links: Any = None,
            trace_state: Any = None,
        ) -> sampling.SamplingResult:
            parent = get_current_span(parent_context).get_span_context()
            if kind == SpanKind.CLIENT and not parent.is_valid:
                return sampling.SamplingResult(sampling.Decision.DROP)
            return configured.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )

        def get_description(self) -> str:
            return f"NoOrphanCalls{{{configured.get_description()}}}"

    return NoOrphanCalls()


def _instrument() -> None:
    """The official instrumentations; each one only once per process."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    for instrumentor in (
        DjangoInstrumentor(),
        CeleryInstrumentor(),
        PsycopgInstrumentor(),
        RedisInstrumentor(),
    ):
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument()


def force_flush(timeout_ms: int = 5000) -> None:
    """Send what the batch processor holds (a process that is about to end)."""
    if _provider is not None:
        _provider.force_flush(timeout_ms)


def current_trace_id() -> str:
    """The current span's trace id (32 hex digits) when it is sampled, else ''."""
    if _tracer is None:
        return ""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid or not context.trace_flags.sampled:
        return ""
    return format(context.trace_id, "032x")


def current_traceparent() -> str:
    """The current span as a W3C traceparent ('' when tracing is off or nothing is current):
    what a later step of the same work links to (adapters.tracing)."""
    if _tracer is None:
        return ""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return ""
    flags = int(context.trace_flags) & 0xFF
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"


def annotate(attributes: dict[str, Any]) -> None:
    """Attributes on the current span when it is recorded (nothing while tracing is off): what
    a step learns once its span has begun (a decision, a count)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(attributes)


def trace_id_of(traceparent: str) -> str:
    """The trace id (32 hex digits) a traceparent names, '' when it names none."""
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return ""
    return parts[1]


def span(name: str, attributes: dict[str, Any], *, links_to: str = "") -> Any:
    """A span current for the block it wraps (the null context while tracing is off), with a
    link to the span `links_to` names when that is another trace: the steps of one piece of work
    that run in traces of their own (a later request, a scheduled task) point at where it began."""
    if _tracer is None:
        return nullcontext()
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    links = []
    if links_to:
        linked = trace.get_current_span(
            TraceContextTextMapPropagator().extract({"traceparent": links_to})
        ).get_span_context()
        current = trace.get_current_span().get_span_context()
        if linked.is_valid and linked.trace_id != current.trace_id:
            links.append(trace.Link(linked, {"lora_portal.link": "origin"}))
    return _tracer.start_as_current_span(name, attributes=attributes, links=links)
