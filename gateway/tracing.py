"""The gateway's spans: one per request (gen_ai semantic conventions plus the adapter's identity)
with a child per step, and the `traceparent` the engine is sent so vLLM's span joins it.

Off (core.telemetry: no OTLP endpoint), every helper returns one shared null context after a
single `is None` test. A request whose span the sampler dropped makes no child spans either; its
engine is still sent its (unsampled) traceparent, so the engine does not start traces of its own.

A caller's own `traceparent` is only a link on the request's span, never its parent: the
gateway's sampler decides, and a caller cannot put its requests into another trace. The spans
carry names, ids and counts, never the caller's content (prompts, answers, error messages).
The library instrumentations (Redis, psycopg) are suppressed inside a request's span: its few
Redis commands would double its spans, and their cost, for what the step spans already say.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from core import telemetry
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.exchange import Outcome
    from gateway.request import GatewayRequest
    from gateway.routes import EngineInfo

NULL: Any = nullcontext()
OPERATIONS = {"chat": "chat", "completion": "text_completion"}
TRACEPARENT = "traceparent"


def request_span(request: GatewayRequest) -> Any:
    """The request's span, current for the steps it wraps (a root: see the module's docstring)."""
    tracer = telemetry.tracer()
    if tracer is None:
        return NULL
    return _request_span(tracer, request)


@contextmanager
def _request_span(tracer: Any, request: GatewayRequest) -> Iterator[Any]:
    from opentelemetry.context import Context
    from opentelemetry.instrumentation.utils import suppress_instrumentation
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode, use_span

    links = []
    caller = _caller_context(request.caller_traceparent)
    if caller is not None:
        links.append(Link(caller, {"lora_portal.link": "caller"}))
    operation = OPERATIONS.get(request.kind, request.kind)
    model = request.payload.get("model")
    model = model if isinstance(model, str) else ""
    span = tracer.start_span(
        f"{operation} {model}".strip(),
        context=Context(),  # a root: never a caller's parent
        kind=SpanKind.SERVER,
        links=links,
    )
    request.span = span
    if not span.is_recording():  # not sampled: no attributes, not current; the engine is told
        with suppress_instrumentation():
            yield span
        return
    span.set_attributes(_identity(request, operation, model))
    current = use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )
    try:
        # Its Redis commands untraced (suppressed): the steps' spans say enough.
        with current, suppress_instrumentation():
            yield span
    except GatewayError as err:
        span.set_attribute("error.type", err.code or str(err.status))
        span.set_attribute("http.response.status_code", err.status)
        span.set_status(Status(StatusCode.ERROR))
        raise
    except BaseException as exc:
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(Status(StatusCode.ERROR))
        raise
    finally:
        span.end()


def _identity(request: GatewayRequest, operation: str, model: str) -> dict[str, Any]:
    """What the request's span says from the start: the operation and model asked for, and
    whose request it is (its own tenant's names only)."""
    target, route = request.target, request.route
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": "vllm",
        "gen_ai.request.model": model,
        "lora_portal.tenant": request.table.tenants.get(request.tenant_id, ""),
        "lora_portal.background": request.background,
    }
    max_tokens = request.payload.get("max_tokens", request.payload.get("max_completion_tokens"))
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
        attributes["gen_ai.request.max_tokens"] = max_tokens
    if route.alias:
        attributes["lora_portal.alias"] = route.name
    if target is not None:
        attributes["lora_portal.adapter"] = target.adapter
        attributes["lora_portal.adapter_version"] = target.label
        attributes["lora_portal.served_name"] = target.served_name
    return attributes


def _caller_context(header: str) -> Any:
    """The caller's span context from its traceparent, or None when absent or malformed."""
    if not header:
        return None
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract({TRACEPARENT: header})
    span_context = get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def step(request: GatewayRequest, name: str, **attributes: Any) -> Any:
    """A child span of the request's for one step; the null context when the request's span
    is not recorded (tracing off, or not sampled)."""
    span = request.span
    if span is None or not span.is_recording():
        return NULL
    tracer = telemetry.tracer()
    return tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    )


def chosen(request: GatewayRequest, engine: EngineInfo) -> None:
    """The engine chosen and where the version was on it at admission (gpu, cpu, cold, base)."""
    span = request.span
    if span is None or not span.is_recording():
        return
    tier = "cold" if request.tier == "none" else str(request.tier)
    service_class = request.admission.service_class  # "" for background requests
    for current in (span, _current()):
        current.set_attribute("lora_portal.engine", engine.name)
        current.set_attribute("lora_portal.cache_tier", tier)
        if service_class:
            current.set_attribute("lora_portal.service_class", service_class)


def engine_call(request: GatewayRequest, engine: EngineInfo) -> Any:
    """The span of the call to the engine (a client span named as gen_ai's conventions name an
    inference call): its traceparent goes to vLLM, whose request span becomes its child."""
    span = request.span
    if span is None or not span.is_recording():
        return NULL
    from opentelemetry.trace import SpanKind

    operation = OPERATIONS.get(request.kind, request.kind)
    served = request.target.served_name if request.target else engine.served_model_name
    return telemetry.tracer().start_as_current_span(
        f"{operation} {served}",
        kind=SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": "vllm",
            "gen_ai.request.model": served,
            "lora_portal.engine": engine.name,
            "server.address": engine.url,
        },
        record_exception=False,
        set_status_on_exception=False,
    )


def engine_headers(request: GatewayRequest) -> dict[str, str] | None:
    """The traceparent the engine is sent: the current (engine call) span when recorded, else
    the request's own span, sampled or not; None while tracing is off."""
    span = request.span
    if span is None:
        return None
    if span.is_recording():
        span = _current()
    context = span.get_span_context()
    flags = int(context.trace_flags) & 0xFF
    return {TRACEPARENT: f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"}


def answered(request: GatewayRequest, outcome: Outcome) -> None:
    """What the engine answered, on the engine call's span and the request's: the response id,
    the tokens, the first token as an event (at the time it came)."""
    span = request.span
    if span is None or not span.is_recording():
        return
    call = _current()
    if outcome.sent != "sent":  # nothing reached the caller: the request moves on
        call.set_attribute("lora_portal.engine_outcome", outcome.sent)
        return
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": outcome.prompt_tokens,
        "gen_ai.usage.output_tokens": outcome.completion_tokens,
        "http.response.status_code": outcome.status,
    }
    if outcome.response_id:
        attributes["gen_ai.response.id"] = outcome.response_id
    if request.target is not None:
        attributes["gen_ai.response.model"] = request.target.served_name
    for current in (call, span):
        current.set_attributes(attributes)
    if outcome.first_token_at is not None:
        ago = time.perf_counter() - outcome.first_token_at
        call.add_event("gen_ai.first_token", timestamp=time.time_ns() - int(ago * 1e9))


def _current() -> Any:
    from opentelemetry.trace import get_current_span

    return get_current_span()


def mark(request: GatewayRequest, name: str, value: Any) -> None:
    """One attribute on the current step's span, when the request is recorded."""
    span = request.span
    if span is not None and span.is_recording():
        _current().set_attribute(name, value)


def start(request: GatewayRequest, name: str) -> Any:
    """A child span that is not made current (a wait that ends inside what it guards); end it
    with `end`. None when the request is not recorded."""
    span = request.span
    if span is None or not span.is_recording():
        return None
    return telemetry.tracer().start_span(name)


def end(span: Any) -> None:
    """End a span from `start`; ending it again (or None) does nothing."""
    if span is not None and span.is_recording():
        span.end()


def sampled_trace_id(request: GatewayRequest) -> str:
    """The request's trace id (32 hex digits) when its span is recorded, else '': the exemplar
    its TTFT and load-wait buckets carry (gateway.recorder)."""
    span = request.span
    if span is None or not span.is_recording():
        return ""
    return format(span.get_span_context().trace_id, "032x")
