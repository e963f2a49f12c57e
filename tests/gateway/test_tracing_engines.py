"""One trace from a caller's request to the engine's own span, read back from a real OTLP
receiver (tests/fixtures/otlp_receiver.py): the gateway exports its spans there, and so do the
session's vLLM engines (engine.launcher's --otlp-traces-endpoint)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from adapters.access import AccessContext
from adapters.models import Alias, AliasTarget
from gateway.metrics import gateway_snapshot
from tenants.services.tokens import token_issue
from tests.fixtures.gateway import running_gateway
from tests.workers.fleet import servable_version

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
SECRET = "the caller's secret words"
CALLER_TRACE = "ab" * 16
CALLER_TRACEPARENT = f"00-{CALLER_TRACE}-{'cd' * 8}-01"  # sampled: a parent would force it


def client_for(world, user: str, tenant, base_url: str) -> openai.OpenAI:
    token = token_issue(
        access=AccessContext.for_user(world.users[user]), scopes=["inference"], tenant=tenant
    )
    return openai.OpenAI(base_url=base_url + "/v1", api_key=token.plaintext, max_retries=0)


def traced_gateway(queue: str, receiver, **env: str):
    return running_gateway(
        queue,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_SERVICE_NAME="lora-portal-gateway",
        OTEL_BSP_SCHEDULE_DELAY="100",
        GATEWAY_REFRESH_SECONDS="0",
        **env,
    )


def stream_chat(client: openai.OpenAI, model: str, **extra: Any) -> str:
    """A streamed chat of three tokens; the completion's id."""
    ids = set()
    for chunk in client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": SECRET}],
        max_tokens=3,
        stream=True,
        **extra,
    ):
        ids.add(chunk.id)
    assert len(ids) == 1
    return ids.pop()


def engine_span(spans: list[dict[str, Any]], response_id: str) -> dict[str, Any] | None:
    """vLLM's span of the request whose completion id is `response_id`."""
    for span in spans:
        if span["service"] == "vllm" and span["attributes"].get("gen_ai.request.id") in (
            response_id,
            response_id.removeprefix("chatcmpl-"),
        ):
            return span
    return None


def test_a_chat_is_one_trace_from_the_gateway_to_the_engines_span(
    worker_fleet, celery_worker_process, otlp_receiver, tmp_path
):
    world = worker_fleet.world
    version = servable_version(world.support, tmp_path, seed=471)
    alias = Alias.objects.create(tenant=world.acme, name="support-bot")
    AliasTarget.objects.create(alias=alias, version=version, weight=100)
    with traced_gateway(celery_worker_process["queue"], otlp_receiver) as base:
        acme = client_for(world, "alice", world.acme, base)
        response_id = stream_chat(
            acme, "support-bot", extra_headers={"traceparent": CALLER_TRACEPARENT}
        )
        globex = client_for(world, "charlie", world.globex, base)
        junk = {"traceparent": "00-not-a-trace"}  # a malformed one is ignored, not an error
        other_id = stream_chat(globex, worker_fleet.handle_a.served_model_name, extra_headers=junk)
        with pytest.raises(openai.BadRequestError):  # refused at admission: a span all the same
            acme.chat.completions.create(
                model="support-bot", messages=[{"role": "user", "content": SECRET}], max_tokens=-1
            )

    spans = otlp_receiver.wait_for(
        lambda spans: engine_span(spans, response_id) and engine_span(spans, other_id)
    )
    vllm = engine_span(spans, response_id)
    assert vllm is not None
    trace = [s for s in spans if s["trace_id"] == vllm["trace_id"]]
    by_id = {s["span_id"]: s for s in trace}
    call = by_id[vllm["parent_span_id"]]  # the engine's span is the gateway's call's child
    assert call["service"] == "lora-portal-gateway"
    assert call["name"] == f"chat {version.served_name}"
    assert [e["name"] for e in call["events"]] == ["gen_ai.first_token"]
    root = next(s for s in trace if s["name"] == "chat support-bot")
    assert root["parent_span_id"] == ""  # a root: the caller's traceparent is not its parent
    assert root["trace_id"] != CALLER_TRACE
    assert root["links"] == [
        {
            "trace_id": CALLER_TRACE,
            "span_id": "cd" * 8,
            "attributes": {"lora_portal.link": "caller"},
        }
    ]
    attributes = root["attributes"]
    engine_name = attributes["lora_portal.engine"]
    assert engine_name in (worker_fleet.a.name, worker_fleet.b.name)
    assert attributes | {"lora_portal.engine": "?"} == attributes | {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "vllm",
        "gen_ai.request.model": "support-bot",
        "gen_ai.request.max_tokens": 3,
        "gen_ai.response.id": response_id,
        "gen_ai.response.model": version.served_name,
        "gen_ai.usage.output_tokens": 3,
        "lora_portal.tenant": "acme",
        "lora_portal.alias": "support-bot",
        "lora_portal.adapter": "support",
        "lora_portal.adapter_version": f"support@{version.number}",
        "lora_portal.cache_tier": "cold",  # nowhere at admission: this request loaded it
        "lora_portal.service_class": "silver",  # acme's class (tests.factories)
        "lora_portal.engine": "?",
    }
    assert attributes["lora_portal.service_class"] == "silver"
    assert attributes["gen_ai.usage.input_tokens"] > 0
    children = [s for s in trace if s["parent_span_id"] == root["span_id"]]
    steps = {s["name"]: s for s in children}
    # The stages the issue names, each once, and nothing else: the admission's Redis round
    # trips and its wait for a slot are timed on its span.
    assert sorted(s["name"] for s in children) == sorted(
        [
            "lora_portal.admission",
            "lora_portal.engine_choice",
            "lora_portal.adapter_load",
            f"chat {version.served_name}",
            "lora_portal.settle",
        ]
    )
    admission = steps["lora_portal.admission"]
    assert admission["attributes"]["lora_portal.service_class"] == "silver"
    assert admission["attributes"]["lora_portal.admission.limits_ms"] > 0
    assert admission["attributes"]["lora_portal.admission.slot_wait_ms"] >= 0
    # It ends once the request holds its slot: before the engine call starts.
    assert admission["end_ns"] <= call["start_ns"]
    assert root["start_ns"] <= admission["start_ns"] and call["end_ns"] <= root["end_ns"]
    first_token = call["events"][0]["time_ns"]
    assert call["start_ns"] <= first_token <= call["end_ns"]
    load = steps["lora_portal.adapter_load"]["attributes"]
    assert load["lora_portal.single_flight_key"] == f"{engine_name}/{version.served_name}"
    assert load["lora_portal.single_flight_leader"] is True
    choice = steps["lora_portal.engine_choice"]["attributes"]
    assert choice == {
        "lora_portal.engine": engine_name,
        "lora_portal.cache_tier": "cold",
        "lora_portal.service_class": "silver",
    }

    # The metrics point at it: its TTFT and load-wait buckets carry its trace as the exemplar.
    snapshot = gateway_snapshot()
    for exemplars in (snapshot.ttft_exemplars, snapshot.load_exemplars):
        traces = {e.labels["trace_id"] for e in exemplars[("acme", "support")].values()}
        assert root["trace_id"] in traces

    # The caller's content is in no span; another tenant's trace names only that tenant.
    assert SECRET not in str(spans)
    other = engine_span(spans, other_id)
    assert other is not None and other["parent_span_id"]
    other_trace = [s for s in spans if s["trace_id"] == other["trace_id"]]
    other_root = next(s for s in other_trace if s["parent_span_id"] == "")
    assert other_root["attributes"]["lora_portal.tenant"] == "globex"
    assert other_root["links"] == []
    refused = next(s for s in spans if s["attributes"].get("http.response.status_code") == 400)
    assert refused["attributes"]["error.type"] == "invalid_request"
    assert refused["attributes"]["http.response.status_code"] == 400
    assert refused["attributes"]["lora_portal.tenant"] == "acme"
    gateway_side = [s for s in other_trace if s["service"] == "lora-portal-gateway"]
    assert "acme" not in str(gateway_side) and "support" not in str(gateway_side)


def test_an_unsampled_request_sends_its_engine_an_unsampled_traceparent(
    worker_fleet, celery_worker_process, otlp_receiver, gateway_server
):
    """The gateway's sampler decides, not the caller's sampled traceparent; the engine follows
    the gateway's decision. With tracing off, the engine is sent nothing (its span is a root)."""
    world = worker_fleet.world
    base_model = worker_fleet.handle_a.served_model_name
    # One engine: its spans leave in the order its requests finished.
    worker_fleet.b.state = "down"
    worker_fleet.b.save()  # a save, not update(): the gateway's tables follow saves
    with traced_gateway(
        celery_worker_process["queue"], otlp_receiver, OTEL_TRACES_SAMPLER="parentbased_always_off"
    ) as base:
        dropped = stream_chat(
            client_for(world, "alice", world.acme, base),
            base_model,
            extra_headers={"traceparent": CALLER_TRACEPARENT},
        )
    untraced = stream_chat(client_for(world, "alice", world.acme, gateway_server), base_model)

    spans = otlp_receiver.wait_for(lambda spans: engine_span(spans, untraced))
    untraced_span = engine_span(spans, untraced)
    assert untraced_span is not None
    assert untraced_span["parent_span_id"] == ""  # tracing off: the engine was sent none
    assert engine_span(spans, dropped) is None  # exported before the later request's span
    assert not [s for s in spans if CALLER_TRACE in (s["trace_id"], *map(str, s["links"]))]
