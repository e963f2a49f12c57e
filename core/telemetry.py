"""OpenTelemetry for every process of the portal: configured the standard way, off when unset.

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
(and `OTEL_SDK_DISABLED` is not `true`). Everything else is the SDK's own environment handling:
the sampler (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`; parent-based always-on by
default), the exporter's protocol, headers and timeouts (`OTEL_EXPORTER_OTLP_*`), the resource
(`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) and the batch processor's queue
(`OTEL_BSP_*`). Spans leave through a BatchSpanProcessor: export never sits on a request's path.

Off, nothing is installed: `tracer()` is None and the callers' spans are one `is None` test.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

log = logging.getLogger(__name__)
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
INSTRUMENTATION_NAME = "lora_portal"

_lock = threading.Lock()
_tracer: Any = None  # opentelemetry.trace.Tracer once configured, else None
_provider: Any = None


def tracing_wanted(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint, the SDK not disabled)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def tracer() -> Any:
    """The portal's tracer, or None while tracing is off."""
    return _tracer


def configure(service_name: str, *, instrument: bool = True) -> Any:
    """Set up tracing for this process once (a forked child keeps it: the batch processor
    restarts its thread after a fork): the SDK's provider with the
    environment's sampler and resource, OTLP over HTTP through a batch processor, and (with
    `instrument`) the official instrumentations of Django, Celery, psycopg and Redis. Returns
    the tracer, or None when the environment does not ask for traces."""
    global _tracer, _provider
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
        provider = TracerProvider(resource=resource)  # sampler: OTEL_TRACES_SAMPLER
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _provider = provider
        _tracer = provider.get_tracer(INSTRUMENTATION_NAME)
        if instrument:
            _instrument()
        log.info("tracing on: %s", service_name)
        return _tracer


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
