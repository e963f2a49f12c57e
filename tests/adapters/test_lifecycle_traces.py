"""A version's lifecycle as traces, read back from a real OTLP receiver: the upload's trace holds
its validation (the Celery task joined through its headers); approval, promotion, release, and
the staging and load on an engine each run in a trace of their own that links to it; the version
page links the upload's trace. The portal, its worker and the gateway trace through the
official instrumentations (Django, Celery, psycopg, Redis)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from adapters.access import AccessContext
from adapters.models import AdapterVersion
from core.telemetry import trace_id_of
from tenants.services.tokens import token_issue
from tests.client.conftest import Cli, issue_token
from tests.client.steps import released
from tests.fixtures.gateway import running_gateway
from tests.gateway.conftest import fleet, worker_fleet  # noqa: F401 - fixtures used here

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
STEPS = ("upload", "validate", "approve", "promote", "release", "stage", "load")


def steps_of(spans: list[dict[str, Any]], served_name: str) -> dict[str, dict[str, Any]]:
    """The version's lifecycle spans by step (the last of each)."""
    found = {}
    for span in spans:
        name = span["name"]
        if name.startswith("lora_portal.version.") and (
            span["attributes"].get("lora_portal.served_name") == served_name
        ):
            found[name.removeprefix("lora_portal.version.")] = span
    return found


def test_a_versions_upload_to_load_is_one_trace_or_linked_to_it(
    worker_fleet,  # noqa: F811 - the fixture imported above
    celery_worker_process,
    otlp_receiver,
    tmp_path,
    client,
    settings,
):
    world = worker_fleet.world
    settings.ADAPTER_STORAGE_ROOT = str(celery_worker_process["storage_root"])
    with running_gateway(
        celery_worker_process["queue"],
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp_receiver.endpoint,
        OTEL_SERVICE_NAME="lora-portal",
        OTEL_BSP_SCHEDULE_DELAY="100",
        GATEWAY_REFRESH_SECONDS="0",
    ) as base:
        cli = Cli(url=base, home=tmp_path / "home")
        cli.home.mkdir()
        for who, scopes in (
            ("alice", ["read", "write", "approve"]),
            ("bob", ["read", "write"]),
            ("rita", ["read", "approve"]),
        ):
            cli.tokens[who] = issue_token(world, who, scopes)
        assert released(cli, tmp_path, seed=470) == "acme/support@1"
        token = token_issue(
            access=AccessContext.for_user(world.users["alice"]),
            scopes=["inference"],
            tenant=world.acme,
        )
        chat = openai.OpenAI(base_url=base + "/v1", api_key=token.plaintext, max_retries=0)
        chat.chat.completions.create(
            model="support", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )  # the first request loads it on an engine

    version = AdapterVersion.objects.get(adapter=world.support, number=1)
    upload_trace = trace_id_of(version.upload_traceparent)
    assert upload_trace

    def complete(spans: list[dict[str, Any]]) -> bool:
        steps = steps_of(spans, version.served_name)
        ids = {s["span_id"] for s in spans}
        return set(STEPS) <= set(steps) and steps["upload"]["parent_span_id"] in ids

    spans = otlp_receiver.wait_for(complete)
    steps = steps_of(spans, version.served_name)

    upload = steps["upload"]
    assert upload["trace_id"] == upload_trace
    assert upload["service"] == "lora-portal"
    # The portal's request span (Django's instrumentation) is the upload's parent.
    parent = next(s for s in spans if s["span_id"] == upload["parent_span_id"])
    assert parent["scope"] == "opentelemetry.instrumentation.django"
    # The validation task ran in the worker, in the upload's trace (Celery's headers).
    assert steps["validate"]["trace_id"] == upload_trace
    assert steps["validate"]["service"] == "lora-portal-worker"
    task = next(s for s in spans if s["span_id"] == steps["validate"]["parent_span_id"])
    assert task["scope"] == "opentelemetry.instrumentation.celery"
    # Later steps: in the upload's trace, or in their own with a link to it.
    for step in ("approve", "promote", "release", "stage", "load"):
        span = steps[step]
        linked = {link["trace_id"] for link in span["links"]}
        in_trace = span["trace_id"] == upload_trace
        promoted_inside_approval = (
            step == "promote" and span["parent_span_id"] == steps["approve"]["span_id"]
        )
        assert in_trace or upload_trace in linked or promoted_inside_approval, step
        assert span["attributes"]["lora_portal.adapter_version"] == "support@1"
        assert span["attributes"]["lora_portal.tenant"] == "acme"
    engines = {worker_fleet.a.name, worker_fleet.b.name}
    load = steps["load"]
    assert load["attributes"]["lora_portal.engine"] in engines
    # Where the load began: the node's disk when the version's files were there (its staging
    # inside the load downloaded nothing), else cold (fetched first).
    staged = [
        s
        for s in spans
        if s["name"] == "lora_portal.version.stage" and s["parent_span_id"] == load["span_id"]
    ]
    assert len(staged) == 1
    downloaded = staged[0]["attributes"]["lora_portal.stage.downloaded"]
    assert load["attributes"]["lora_portal.cache_tier"] == ("cold" if downloaded else "disk")
    assert load["attributes"]["lora_portal.stage_ms"] >= 0
    # The database and Redis calls are spans too (psycopg's and Redis's instrumentations).
    in_upload = {s["scope"] for s in spans if s["trace_id"] == upload_trace}
    assert {
        "opentelemetry.instrumentation.psycopg",
        "opentelemetry.instrumentation.redis",
    } <= in_upload

    # The version page links the upload's trace in the trace store.
    settings.TRACE_URL_TEMPLATE = "http://traces.example/trace/{trace_id}"
    client.force_login(world.users["alice"])
    page = client.get("/t/acme/a/support/v/1/")
    assert page.status_code == 200
    assert f'href="http://traces.example/trace/{upload_trace}"' in page.content.decode()
