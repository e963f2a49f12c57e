"""The tracing bench's join count and goals (bench/gateway_tracing.py), on spans as the OTLP
receiver writes them."""

from __future__ import annotations

from typing import Any

from bench import gateway_support as gs
from bench.gateway_tracing import SERVICE, TracingResult, joined_requests, render

IDENTITY = {
    "lora_portal.tenant": "acme",
    "lora_portal.alias": "support-bot",
    "lora_portal.adapter_version": "support@1",
    "lora_portal.cache_tier": "gpu",
}


def request(n: int, *, attributes: dict[str, Any], engine: bool) -> list[dict[str, Any]]:
    """A gateway request span, its engine call (client) and, if `engine`, vLLM's child span."""
    service = SERVICE["100%"]
    root = {"service": service, "span_id": f"r{n}", "parent_span_id": "", "kind": 2}
    call = {"service": service, "span_id": f"c{n}", "parent_span_id": f"r{n}", "kind": 3}
    spans = [{**root, "name": "chat support-bot", "attributes": attributes}]
    spans.append({**call, "name": "chat served", "attributes": {}})
    if engine:
        spans.append(
            {
                "service": "vllm",
                "span_id": f"v{n}",
                "parent_span_id": f"c{n}",
                "kind": 2,
                "name": "llm_request",
                "attributes": {},
            }
        )
    return spans


def test_a_request_joins_when_its_call_parents_an_engine_span_and_it_carries_the_identity():
    spans = request(1, attributes=IDENTITY, engine=True)
    spans += request(2, attributes={**IDENTITY, "lora_portal.alias": ""}, engine=True)
    spans += request(3, attributes=IDENTITY, engine=False)
    assert joined_requests(spans) == (3, 2, 1)


def result(joined: int, roots: int, sent: int) -> TracingResult:
    same = gs.Summary(n=10, errors=0, p50=2.0, p99=3.0, mean=2.0)
    per_kind = {"chat": {"off": same, "1%": same, "100%": same}}
    return TracingResult(
        latency={"stub": per_kind, "engine": per_kind},
        throughput={
            "stub": {"off": 100, "1%": 99, "100%": 98},
            "engine": dict.fromkeys(("off", "1%", "100%"), 30.0),
        },
        sent_traced=sent,
        joined=joined,
        gateway_spans=roots,
        engine_spans=joined,
        requests=10,
        load_requests=10,
        stub_requests=10,
        concurrency=16,
    )


def test_the_goals_say_whether_every_request_joined():
    met = {goal: ok for goal, _value, ok in result(5, 5, 5).goals()}
    assert all(met.values())
    missing = [ok for _goal, _value, ok in result(4, 5, 5).goals()]
    assert missing[:2] == [True, False]
    untraced = [ok for _goal, _value, ok in result(4, 4, 5).goals()]
    assert untraced[0] is False
    assert "| no |" in render(result(4, 5, 5), "cmd") and "(80.0%)" in render(
        result(4, 5, 5), "cmd"
    )


def test_core_0s_processes_and_the_stub_phases_spans_are_reported():
    modes = ("off", "1%", "100%")
    r = result(5, 5, 5)
    r.cpu_ms = {"stub": dict.fromkeys(modes, 0.4)}
    r.gateway_busy = {"stub": dict.fromkeys(modes, 0.9)}
    r.exporter_cpu_ms = {"stub": {"1%": 0.001, "100%": 0.03}}
    r.core0_ms = {"stub": {m: {"load generator": 0.1, "stub": 0.05} for m in modes}}
    r.stub_sent_traced, r.stub_spans = 200, 150
    out = render(r, "cmd")
    assert "| load generator | 0.100 | 0.100 | 0.100 |" in out
    assert "| exporter | 0.000 | 0.001 | 0.030 |" in out
    assert "150 request spans for the 200 requests" in out


def test_each_rounds_ratio_to_its_own_off_run_is_reported():
    r = result(5, 5, 5)
    r.round_rps = {
        "stub": {
            "off": [100.0, 200.0, 100.0],
            "1%": [90.0, 220.0, 100.0],
            "100%": [50.0, 100.0, 80.0],
        }
    }
    out = render(r, "cmd")
    assert (
        "stub: 1% 0.900x to 1.100x (median 1.000x); 100% 0.500x to 0.800x (median 0.500x)." in out
    )
