"""The gateway's spans: one per request (gen_ai semantic conventions plus the adapter's identity)
with a child for each step the request takes (admission, the engine choice, a cold load waited
on, the engine call with its first token as an event, settlement), and the `traceparent` the
engine is sent so vLLM's span joins it.

What it costs is decided once, at the request's start, by the environment's sampler
(OTEL_TRACES_SAMPLER, core.telemetry.root_sampler) on a trace id of the request's own:

- Off (no OTLP endpoint): every helper returns one shared null context after an `is None` test.
- Not sampled: no span objects, no attributes, no children. The request holds its traceparent
  (flags 00), and the engine is sent it, so the engine (parent-based) does not trace it either.
- Sampled: the spans are plain tuples, timed with the perf_counter values the steps take anyway
  (told as Unix time by the span exporter, from the one wall-clock reading the request takes),
  their attributes set in one dict each; at the request's end they go to the span exporter
  process (core.span_export), which encodes OTLP off this process's GIL. The admission's parts
  that are not steps of their own (the Redis round trips for rate, requests in flight and
  budgets; the wait for a fair slot on the engine) are timed on the admission span, which ends
  when the request holds its slot.

A caller's own `traceparent` is only a link on the request's span, never its parent: the
gateway's sampler decides, and a caller cannot put its requests into another trace. The spans
carry names, ids and counts, never the caller's content (prompts, answers, error messages).
The library instrumentations (Redis, psycopg) are suppressed while a request is served: its few
Redis commands would double its spans, and their cost, for what the step spans already say.
"""

from __future__ import annotations

import time
from random import getrandbits
from typing import TYPE_CHECKING, Any

from core import telemetry
from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.exchange import Outcome
    from gateway.request import GatewayRequest
    from gateway.routes import EngineInfo


class _Null:
    """The shared do-nothing context (cheaper to enter than contextlib.nullcontext)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


NULL: Any = _Null()
OPERATIONS = {"chat": "chat", "completion": "text_completion"}
TRACEPARENT = "traceparent"
SERVER, CLIENT, INTERNAL = 1, 2, 0  # opentelemetry.trace.SpanKind's values
ADMISSION = "lora_portal.admission"
ADMISSION_PARTS = {"lora_portal.admission.limits": "lora_portal.admission.limits_ms"}
SLOT = "lora_portal.admission.slot"
_perf = time.perf_counter


class Unsampled:
    """A request the sampler dropped: only the traceparent its engine is sent."""

    __slots__ = ("traceparent",)
    recording = False

    def __init__(self, traceparent: str) -> None:
        self.traceparent = traceparent


class Trace:
    """A sampled request's spans, as tuples (core.span_export's form)."""

    __slots__ = (
        "trace_id",
        "span_id",
        "wall_ns",
        "perf",
        "name",
        "attributes",
        "links",
        "spans",
        "current",
        "admission",
        "call",
        "error",
    )
    recording = True

    def __init__(self, trace_id: int, name: str, attributes: dict[str, Any], links: list) -> None:
        self.trace_id = trace_id
        self.span_id = getrandbits(64) or 1
        self.wall_ns = time.time_ns()  # with `perf`: the clock the tuples' perf times are told on
        self.perf = _perf()
        self.name = name
        self.attributes = attributes
        self.links = links
        self.spans: list[tuple[Any, ...]] = []
        self.current: Step | None = None
        self.admission: Step | None = None
        self.call: Step | None = None
        self.error = False

    def traceparent(self, span_id: int) -> str:
        return f"00-{self.trace_id:032x}-{span_id:016x}-01"


class Step:
    """A child span of the request's, current while its block runs."""

    __slots__ = ("trace", "name", "kind", "attributes", "events", "span_id", "start", "before")

    def __init__(self, trace: Trace, name: str, attributes: dict[str, Any], kind: int = 0) -> None:
        self.trace = trace
        self.name = name
        self.kind = kind
        self.attributes = attributes
        self.events: list[tuple[str, float, dict[str, Any]]] | tuple[()] = ()
        self.span_id = getrandbits(64) or 1
        self.start = 0.0
        self.before: Step | None = None

    def __enter__(self) -> Step:
        self.start = _perf()
        self.before, self.trace.current = self.trace.current, self
        return self

    def __exit__(self, *exc: object) -> None:
        self.trace.current = self.before
        self.end()

    def end(self, at: float | None = None) -> None:
        trace = self.trace
        trace.spans.append(
            (
                self.span_id,
                trace.span_id,
                self.name,
                self.kind,
                self.start,
                _perf() if at is None else at,
                self.attributes,
                self.events,
                (),
                False,
            )
        )


class Admission(Step):
    """The admission's span: opened by its first step, ended when the request holds its slot on
    the engine (or at the request's end); its other parts add their time to it."""

    __slots__ = ()

    def __exit__(self, *exc: object) -> None:
        self.trace.current = self.before  # stays open: the limits and the slot are its parts

    def finish(self) -> None:
        if self.trace.admission is self:
            self.trace.admission = None
            self.end()


class Part:
    """One part of the admission timed on its span (milliseconds, summed)."""

    __slots__ = ("trace", "key", "start")

    def __init__(self, trace: Trace, key: str) -> None:
        self.trace, self.key = trace, key

    def __enter__(self) -> None:
        self.start = _perf()

    def __exit__(self, *exc: object) -> None:
        admission = self.trace.admission
        if admission is not None:
            ms = (_perf() - self.start) * 1000
            admission.attributes[self.key] = round(admission.attributes.get(self.key, 0.0) + ms, 3)


class _RequestSpan:
    """The request's span for the block it wraps; decides the sampling (see the docstring)."""

    __slots__ = ("request", "token")

    def __init__(self, request: GatewayRequest) -> None:
        self.request = request

    def __enter__(self) -> Any:
        request = self.request
        pipe = telemetry.span_pipe()
        pipe.ensure()
        trace_id = getrandbits(128) or 1
        operation = OPERATIONS.get(request.kind, request.kind)
        model = request.payload.get("model")
        model = model if isinstance(model, str) else ""
        if not _sampled(trace_id):
            request.span = Unsampled(f"00-{trace_id:032x}-{getrandbits(64) or 1:016x}-00")
        else:
            caller = _caller_link(request.caller_traceparent)
            request.span = Trace(
                trace_id,
                f"{operation} {model}".strip(),
                _identity(request, operation, model),
                [caller] if caller is not None else [],
            )
        # Its Redis commands untraced (suppressed): the steps' spans say enough.
        attach, _ = _context()
        self.token = attach(_suppressed())
        return request.span

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        _context()[1](self.token)
        trace = self.request.span
        if not trace.recording:
            return
        if exc is not None:
            attributes = trace.attributes
            if isinstance(exc, GatewayError):
                attributes["error.type"] = exc.code or str(exc.status)
                attributes["http.response.status_code"] = exc.status
            else:
                attributes["error.type"] = type(exc).__qualname__
            trace.error = True
        if trace.admission is not None:
            trace.admission.finish()
        trace.spans.append(
            (
                trace.span_id,
                0,
                trace.name,
                SERVER,
                self.request.started,
                _perf(),
                trace.attributes,
                (),
                trace.links,
                trace.error,
            )
        )
        telemetry.span_pipe().put((trace.trace_id, trace.wall_ns, trace.perf, trace.spans))


_SUPPRESSED: Any = None
_SAMPLER: Any = None
_CONTEXT: Any = None


def _context() -> Any:
    """opentelemetry.context's attach and detach (imported once, when tracing is on)."""
    global _CONTEXT
    if _CONTEXT is None:
        from opentelemetry import context

        _CONTEXT = (context.attach, context.detach)
    return _CONTEXT


def _suppressed() -> Any:
    """The context a request is served in: the instrumentations suppressed (one shared one)."""
    global _SUPPRESSED
    if _SUPPRESSED is None:
        from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, Context, set_value

        _SUPPRESSED = set_value(_SUPPRESS_INSTRUMENTATION_KEY, True, Context())
    return _SUPPRESSED


def _sampled(trace_id: int) -> bool:
    """The environment's sampler's decision for a root span of `trace_id`."""
    global _SAMPLER
    if _SAMPLER is None:
        _SAMPLER = _decider(telemetry.root_sampler())
    return bool(_SAMPLER(trace_id))


def _decider(sampler: Any) -> Any:
    """`sampler`'s decision for a root as a function of the trace id: the SDK's own samplers
    told directly (a parent-based one decides a root by its root sampler: always on or off,
    or the trace id's ratio), any other asked through its should_sample."""
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.trace import SpanKind

    root = sampler
    while isinstance(root, sampling.ParentBased):
        root = root._root  # noqa: SLF001 - the root's sampler decides a root span
    if isinstance(root, sampling.TraceIdRatioBased):
        bound, mask = root.bound, sampling.TraceIdRatioBased.TRACE_ID_LIMIT
        return lambda trace_id: trace_id & mask < bound
    if isinstance(root, sampling.StaticSampler):
        decision = root._decision.is_sampled()  # noqa: SLF001 - always on or always off
        return lambda trace_id: decision
    empty = Context()

    def ask(trace_id: int) -> bool:
        result = sampler.should_sample(empty, trace_id, "gateway", SpanKind.SERVER)
        return bool(result.decision.is_sampled())

    return ask


def request_span(request: GatewayRequest) -> Any:
    """The request's span for the block it wraps (a root: see the module's docstring)."""
    if telemetry.tracer() is None:
        return NULL
    return _RequestSpan(request)


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


def _caller_link(header: str) -> tuple[int, int, int, dict[str, str]] | None:
    """The caller's span context from its W3C traceparent as a link, or None when absent or
    malformed (version 00 or later; an unknown version may carry more fields)."""
    if not header:
        return None
    parts = header.strip().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    version, trace, span, flags = parts[:4]
    if version == "00" and len(parts) != 4:
        return None
    if len(trace) != 32 or len(span) != 16 or len(flags) != 2:
        return None
    try:
        trace_id, span_id, trace_flags = int(trace, 16), int(span, 16), int(flags, 16)
        int(version, 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return (trace_id, span_id, trace_flags, {"lora_portal.link": "caller"})


def _recorded(request: GatewayRequest) -> Trace | None:
    trace = request.span
    return trace if trace is not None and trace.recording else None


def step(request: GatewayRequest, name: str, **attributes: Any) -> Any:
    """A child span of the request's for one step; the null context when the request is not
    recorded (tracing off, or not sampled). The admission's parts (ADMISSION_PARTS) are timed
    on the admission's span rather than spans of their own."""
    trace = request.span
    if trace is None or not trace.recording:
        return NULL
    part = ADMISSION_PARTS.get(name)
    if part is not None:
        return Part(trace, part)
    if name == ADMISSION:
        admission = trace.admission = Admission(trace, name, attributes)
        return admission
    return Step(trace, name, attributes)


def chosen(request: GatewayRequest, engine: EngineInfo) -> None:
    """The engine chosen and where the version was on it at admission (gpu, cpu, cold, base)."""
    trace = _recorded(request)
    if trace is None:
        return
    tier = "cold" if request.tier == "none" else str(request.tier)
    attributes = {"lora_portal.engine": engine.name, "lora_portal.cache_tier": tier}
    service_class = request.admission.service_class  # "" for background requests
    if service_class:
        attributes["lora_portal.service_class"] = service_class
    trace.attributes.update(attributes)
    if trace.current is not None:
        trace.current.attributes.update(attributes)
    if trace.admission is not None and service_class:
        trace.admission.attributes["lora_portal.service_class"] = service_class


def engine_call(request: GatewayRequest, engine: EngineInfo) -> Any:
    """The span of the call to the engine (a client span named as gen_ai's conventions name an
    inference call): its traceparent goes to vLLM, whose request span becomes its child."""
    trace = _recorded(request)
    if trace is None:
        return NULL
    operation = OPERATIONS.get(request.kind, request.kind)
    served = request.target.served_name if request.target else engine.served_model_name
    call = trace.call = Step(
        trace,
        f"{operation} {served}",
        {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": "vllm",
            "gen_ai.request.model": served,
            "lora_portal.engine": engine.name,
            "server.address": engine.url,
        },
        CLIENT,
    )
    return call


def engine_headers(request: GatewayRequest) -> dict[str, str] | None:
    """The traceparent the engine is sent: the engine call's span when recorded, else the
    request's own unsampled one; None while tracing is off."""
    trace = request.span
    if trace is None:
        return None
    if not trace.recording:
        return {TRACEPARENT: trace.traceparent}
    call = trace.call
    return {TRACEPARENT: trace.traceparent(call.span_id if call is not None else trace.span_id)}


def answered(request: GatewayRequest, outcome: Outcome) -> None:
    """What the engine answered, on the engine call's span and the request's: the response id,
    the tokens, the first token as an event (at the time it came)."""
    trace = _recorded(request)
    if trace is None or trace.call is None:
        return
    call = trace.call
    if outcome.sent != "sent":  # nothing reached the caller: the request moves on
        call.attributes["lora_portal.engine_outcome"] = outcome.sent
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
    call.attributes.update(attributes)
    trace.attributes.update(attributes)
    if outcome.first_token_at is not None:
        call.events = [("gen_ai.first_token", outcome.first_token_at, {})]


def mark(request: GatewayRequest, name: str, value: Any) -> None:
    """One attribute on the current step's span, when the request is recorded."""
    trace = _recorded(request)
    if trace is not None and trace.current is not None:
        trace.current.attributes[name] = value


def start(request: GatewayRequest, name: str) -> Any:
    """A wait that ends inside what it guards, ended with `end`: the wait for the engine's slot
    (SLOT) is the admission's last part. None when the request is not recorded."""
    trace = _recorded(request)
    if trace is None:
        return None
    if name == SLOT:
        part = Part(trace, "lora_portal.admission.slot_wait_ms")
        part.__enter__()
        return part
    begun = Step(trace, name, {})
    begun.start = _perf()
    return begun


def end(begun: Any) -> None:
    """End what `start` began; ending it again (or None) does nothing. The slot's wait ends the
    admission's span."""
    if begun is None:
        return
    trace = begun.trace
    if isinstance(begun, Part):
        if trace.admission is not None:
            begun.__exit__(None, None, None)
            trace.admission.finish()
        return
    if begun.start:
        begun.end()
        begun.start = 0.0


def sampled_trace_id(request: GatewayRequest) -> str:
    """The request's trace id (32 hex digits) when it is recorded, else '': the exemplar its
    TTFT and load-wait buckets carry (gateway.recorder)."""
    trace = _recorded(request)
    return "" if trace is None else format(trace.trace_id, "032x")
