"""What each step of the gateway's tracing costs, one process, no network (timeit):

    .venv/bin/python -m bench.tracing_micro [--number 20000]

- the SDK's way (what the gateway did before): a span created, attributes set, ended, through a
  TracerProvider whose BatchSpanProcessor queues it (the export thread idle), and a span's OTLP
  protobuf encoding (opentelemetry-exporter-otlp-proto-common; protobuf's implementation named);
- the gateway's way (gateway.tracing): the sampling decision and traceparent of an unsampled
  request, a sampled request's five spans recorded as tuples and marshalled for the exporter
  process; and in that process (core.span_export), a request's spans written as OTLP protobuf
  (core.otlp_wire), against the SDK's way there (ReadableSpans, then its encoder).

Prints microseconds per operation; docs/benchmarks.md ("Gateway tracing") quotes it.
"""

from __future__ import annotations

import argparse
import marshal
import os
import sys
import timeit
from typing import Any

ATTRS: dict[str, Any] = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "vllm",
    "gen_ai.request.model": "support-bot",
    "lora_portal.tenant": "acme",
    "lora_portal.background": False,
    "gen_ai.request.max_tokens": 16,
    "lora_portal.alias": "support-bot",
    "lora_portal.adapter": "support",
    "lora_portal.adapter_version": "support@3",
    "lora_portal.served_name": "acme--support--v3-1f2e3d4c",
}


def per_op(func: Any, number: int) -> float:
    """Microseconds per call, best of three."""
    return min(timeit.repeat(func, number=number, repeat=3)) / number * 1e6


def sdk_costs(number: int) -> dict[str, float]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Idle(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Idle(), max_queue_size=10**7))
    tracer = provider.get_tracer("bench")

    def one() -> None:
        span = tracer.start_span("lora_portal.engine_choice", attributes=ATTRS)
        span.end()

    kept: list[Any] = []
    span = tracer.start_span("chat support-bot", attributes=ATTRS)
    span.end()
    kept.append(span)
    out = {
        "sdk span create+end (10 attributes)": per_op(one, number),
        "sdk OTLP encode, one span": per_op(lambda: encode_spans(kept).SerializeToString(), number),
    }
    provider.shutdown()
    return out


def gateway_costs(number: int) -> dict[str, float]:
    from core import otlp_wire, span_export
    from gateway import tracing

    os.environ["OTEL_TRACES_SAMPLER_ARG"] = "0.01"
    from opentelemetry.sdk.trace import sampling

    ratio = sampling.ParentBased(sampling.TraceIdRatioBased(0.01))
    decide = tracing._decider(ratio)  # noqa: SLF001 - the function under test

    def unsampled() -> None:
        trace_id = tracing.getrandbits(128)
        if not decide(trace_id):
            tracing.Unsampled(f"00-{trace_id:032x}-{tracing.getrandbits(64):016x}-00")

    records: list[Any] = []

    def sampled() -> None:
        trace = tracing.Trace(tracing.getrandbits(128), "chat support-bot", dict(ATTRS), [])
        trace.admission = tracing.Admission(trace, tracing.ADMISSION, {})
        with trace.admission:
            pass
        with tracing.Step(trace, "lora_portal.engine_choice", {}) as choice:
            choice.attributes.update({"lora_portal.engine": "e1", "lora_portal.cache_tier": "gpu"})
        with tracing.Part(trace, "lora_portal.admission.limits_ms"):
            pass
        trace.admission.finish()
        call = tracing.Step(trace, "chat served", {"gen_ai.operation.name": "chat"}, 2)
        with call:
            trace.traceparent(call.span_id)
            call.attributes.update({"gen_ai.usage.input_tokens": 5})
            call.events = [("gen_ai.first_token", tracing._perf(), {})]
        with tracing.Step(trace, "lora_portal.settle", {}):
            pass
        trace.spans.append(
            (
                trace.span_id,
                0,
                trace.name,
                1,
                trace.perf,
                tracing._perf(),
                trace.attributes,
                (),
                (),
                0,
            )
        )
        records.append((trace.trace_id, trace.wall_ns, trace.perf, trace.spans))

    def pipe_bytes() -> None:
        marshal.dumps(records[:100])

    out = {
        "gateway: unsampled request (decision + traceparent)": per_op(unsampled, number),
        "gateway: sampled request, 5 spans recorded as tuples": per_op(sampled, number),
    }
    out["gateway: marshal, per request (batches of 100)"] = per_op(pipe_bytes, number // 100) / 100
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    resource, scope = Resource.create({"service.name": "bench"}), InstrumentationScope("b")
    batch = records[:100]

    def sdk_side() -> None:
        spans = [s for r in batch for s in span_export.readable_spans(r, resource, scope)]
        encode_spans(spans).SerializeToString()

    encoder = otlp_wire.Encoder(dict(resource.attributes), "b")

    def exporter_side() -> None:
        encoder.request([s for r in batch for s in encoder.record(r)])

    out["the SDK's way in the exporter: per request (ReadableSpans + encode, 5 spans)"] = (
        per_op(sdk_side, max(1, number // 1000)) / 100
    )
    out["exporter process: per request (core.otlp_wire, 5 spans)"] = (
        per_op(exporter_side, max(1, number // 100)) / 100
    )
    return out


def request_path_costs(number: int) -> dict[str, float]:
    """One request through gateway.tracing's calls as gateway/app.py makes them (a warm
    version: admission, choice, limits, slot, engine call, settle), sampled and not; the
    spans go to a pipe that keeps nothing."""
    from types import SimpleNamespace

    from opentelemetry.sdk.trace import sampling

    from core import telemetry
    from gateway import tracing
    from gateway.exchange import Outcome

    class Discard:
        def ensure(self) -> None:
            pass

        def put(self, record: Any) -> None:
            pass

    telemetry._tracer = object()  # noqa: SLF001 - on, for the calls below
    telemetry._pipe = Discard()  # noqa: SLF001
    target = SimpleNamespace(
        adapter="support",
        label="support@3",
        served_name="acme--support--v3-1f2e3d4c",
        version_id=3,
    )
    route = SimpleNamespace(alias=True, name="support-bot")
    table = SimpleNamespace(tenants={1: "acme"})
    engine: Any = SimpleNamespace(name="e1", url="http://127.0.0.1:8001", served_model_name="base")
    outcome = Outcome("sent", ok=True, status=200, prompt_tokens=9, completion_tokens=1)
    outcome.response_id = "chatcmpl-1"

    def one() -> None:
        request: Any = SimpleNamespace(
            kind="chat",
            payload={"model": "support-bot", "max_tokens": 16},
            route=route,
            target=target,
            table=table,
            tenant_id=1,
            started=tracing._perf(),  # noqa: SLF001
            background=False,
            caller_traceparent="",
            span=None,
            tier="gpu",
            admission=SimpleNamespace(service_class="silver"),
        )
        with tracing.request_span(request):
            with tracing.step(request, "lora_portal.admission"):
                pass
            with tracing.step(request, "lora_portal.engine_choice"):
                tracing.chosen(request, engine)
            with tracing.step(request, "lora_portal.admission.limits"):
                pass
            waiting = tracing.start(request, "lora_portal.admission.slot")
            tracing.end(waiting)
            with tracing.engine_call(request, engine):
                tracing.engine_headers(request)
                outcome.first_token_at = tracing._perf()  # noqa: SLF001
                tracing.answered(request, outcome)
            with tracing.step(request, "lora_portal.settle"):
                tracing.sampled_trace_id(request)
            tracing.end(waiting)

    out = {}
    for label, sampler in (
        ("gateway.tracing calls, one request, unsampled (1 %'s usual case)", sampling.ALWAYS_OFF),
        ("gateway.tracing calls, one request, sampled", sampling.ALWAYS_ON),
    ):
        telemetry._root_sampler = sampler  # noqa: SLF001
        tracing._SAMPLER = None  # noqa: SLF001 - decided again from the sampler above
        out[label] = per_op(one, number)
    telemetry._tracer = None  # noqa: SLF001
    out["gateway.tracing calls, one request, tracing off"] = per_op(one, number)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")  # no secret key needed: nothing is served
    import django

    django.setup()
    from google.protobuf.internal import api_implementation  # type: ignore[import-untyped]

    print(f"python {sys.version.split()[0]}; protobuf implementation: {api_implementation.Type()}")
    print(f"load average: {os.getloadavg()[0]:.1f}")
    results = {
        **sdk_costs(args.number),
        **gateway_costs(args.number),
        **request_path_costs(args.number),
    }
    for name, us in results.items():
        print(f"{us:8.2f} us  {name}")


if __name__ == "__main__":
    main()
