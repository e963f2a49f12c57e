"""GET /metrics: values equal to the rows behind them, a constant number of queries whatever the
fleet's size, and only operators, platform admins and superusers may read it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from adapters.models import AdapterVersion
from tests.factories import make_user
from workers.metrics import fleet_registry
from workers.models import Engine, EngineAlarm, FleetAction, Residency

SCRAPE_QUERIES = 6  # the fleet's five, and the engine names the classes' slots are read for


def _engine(world, name: str, state: str = "up") -> Engine:
    return Engine.objects.create(
        name=name,
        base_model=world.base,
        url=f"http://{name}.internal:8000",
        served_model_name="tiny-base",
        adapter_root="/srv/adapters",
        state=state,
    )


def _versions(world, count: int, *, first: int = 1) -> list[AdapterVersion]:
    return [
        AdapterVersion.objects.create(
            tenant=world.acme,
            adapter=world.support,
            number=n,
            served_name=f"acme--support--v{n}-{n:08x}",
            rank=8,
            size_bytes=1000 * n,
        )
        for n in range(first, first + count)
    ]


def _action(engine, kind, *, ok=True, latency=None, ago=timedelta(minutes=1)) -> None:
    FleetAction.objects.create(
        engine=engine,
        served_name="x",
        kind=kind,
        ok=ok,
        latency_ms=latency,
        created_at=timezone.now() - ago,
    )


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples, name: str, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def fleet(world):
    e1, e2 = _engine(world, "e1"), _engine(world, "e2", state="down")
    v = _versions(world, 6)
    for version, state in zip(
        v, ["resident_gpu", "pinned", "resident_cpu", "resident_cpu", "registered", "absent"]
    ):
        Residency.objects.create(engine=e1, version=version, observed_state=state)
    Residency.objects.create(engine=e2, version=v[0], observed_state="resident_cpu")
    for latency in (100.0, 200.0, 300.0, 400.0, 5000.0):
        _action(e1, "load", latency=latency)
    _action(e1, "load", latency=9999.0, ago=timedelta(hours=2))  # counted, outside the hour
    _action(e1, "load", ok=False, latency=1.0)  # failed: neither counted nor timed
    for kind in ("evict", "evict", "unload"):
        _action(e1, kind)
    _action(e1, "evict", ok=False)
    _action(e1, "warm")
    EngineAlarm.objects.create(engine=e1, kind="thrash", message="m")
    EngineAlarm.objects.create(engine=e1, kind="quarantine", subject="a", message="m")
    EngineAlarm.objects.create(engine=e1, kind="quarantine", subject="b", message="m")
    EngineAlarm.objects.create(engine=e2, kind="thrash", message="old", cleared_at=timezone.now())
    return world


def scrape(world, who: str = "olga") -> dict:
    response = world.client(who).get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse(response.content.decode())


def test_values_equal_the_rows(fleet):
    s = scrape(fleet)
    assert value(s, "adapter_gpu_resident_count", engine="e1") == 2
    assert value(s, "adapter_gpu_resident_count", engine="e2") == 0
    for tier, count, size in (
        ("resident_gpu", 1, 1000),
        ("pinned", 1, 2000),
        ("resident_cpu", 2, 3000 + 4000),
        ("registered", 1, 5000),
    ):
        assert value(s, "adapter_resident_count", engine="e1", tier=tier) == count
        assert value(s, "adapter_memory_bytes", engine="e1", tier=tier) == size
    assert value(s, "adapter_resident_count", engine="e2", tier="resident_cpu") == 1
    assert value(s, "adapter_memory_bytes", engine="e2", tier="pinned") == 0
    assert ("adapter_resident_count", frozenset({("engine", "e1"), ("tier", "absent")})) not in s
    assert value(s, "adapter_eviction_count_total", engine="e1") == 3
    assert value(s, "adapter_load_count_total", engine="e1") == 6
    assert value(s, "adapter_load_count_total", engine="e2") == 0
    assert value(s, "adapter_load_latency_ms_count", engine="e1") == 5
    assert value(s, "adapter_load_latency_ms_sum", engine="e1") == 6000.0
    assert value(s, "adapter_load_latency_ms", engine="e1", quantile="0.5") == 300.0
    assert value(s, "adapter_load_latency_ms", engine="e1", quantile="0.95") == 5000.0
    assert value(s, "adapter_load_latency_ms_count", engine="e2") == 0
    assert ("adapter_load_latency_ms", frozenset({("engine", "e2"), ("quantile", "0.5")})) not in s
    assert value(s, "lora_portal_engine_thrashing", engine="e1") == 1
    assert value(s, "lora_portal_engine_thrashing", engine="e2") == 0  # its alarm was cleared
    assert value(s, "lora_portal_engine_up", engine="e1", state="up") == 1
    assert value(s, "lora_portal_engine_up", engine="e2", state="down") == 0
    assert value(s, "lora_portal_alarms_open", engine="e1", kind="quarantine") == 2
    assert value(s, "lora_portal_alarms_open", engine="e1", kind="thrash") == 1
    assert value(s, "lora_portal_alarms_open", engine="e1", kind="placement") == 0
    assert value(s, "lora_portal_alarms_open", engine="e2", kind="thrash") == 0


def test_labels_are_per_engine_never_per_version(fleet):
    # Only the fleet's own families: the gateway's (adapter_requests_total, ...) are labelled per
    # tenant and adapter, and may be present from earlier requests.
    from workers.metrics import FleetCollector

    own = {m.name for m in FleetCollector().collect()}
    labels = {
        label
        for name, labels in scrape(fleet)
        if any(name == f or name.startswith(f + "_") for f in own)
        for label, _ in labels
    }
    assert labels == {"engine", "tier", "state", "kind", "quantile"}


def _scrape_queries() -> int:
    with CaptureQueriesContext(connection) as queries:
        text = generate_latest(fleet_registry()).decode()
    assert "adapter_resident_count" in text
    return len(queries)


def test_query_count_does_not_grow_with_the_fleet(world):
    def grow(first_engine: int, count: int) -> None:
        for i in range(first_engine, first_engine + count):
            engine = _engine(world, f"e{i}")
            for version in _versions(world, 2, first=2 * i + 1):
                Residency.objects.create(engine=engine, version=version, observed_state="pinned")
            _action(engine, "load", latency=10.0)
            _action(engine, "evict")
            EngineAlarm.objects.create(engine=engine, kind="thrash", message="m")

    grow(0, 2)
    small = _scrape_queries()
    grow(2, 18)
    assert Engine.objects.count() == 20
    assert _scrape_queries() == small == SCRAPE_QUERIES


@pytest.mark.parametrize("who", ["alice", "vera", "charlie", "rita", "nora"])
def test_tenant_users_and_reviewers_are_forbidden(fleet, who):
    response = fleet.client(who).get("/metrics")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"


def test_anonymous_is_asked_to_authenticate(fleet):
    response = fleet.client(None).get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert b"adapter" not in response.content


def test_a_bad_token_is_refused(fleet):
    client = fleet.client(None)
    client.credentials(HTTP_AUTHORIZATION="Bearer lp_nope_nothing")
    assert client.get("/metrics").status_code == 401


def test_operators_admins_and_superusers_may_read(fleet):
    for who in ("olga", "adam"):
        assert value(scrape(fleet, who), "adapter_gpu_resident_count", engine="e1") == 2
    fleet.users["root"] = make_user("root")
    fleet.users["root"].is_superuser = True
    fleet.users["root"].save()
    scrape(fleet, "root")


def test_an_operators_bearer_token_reads_it(fleet):
    response = fleet.token_client("olga", ["read"]).get("/metrics")
    assert response.status_code == 200
    assert value(parse(response.content.decode()), "lora_portal_engine_thrashing", engine="e1")


@pytest.mark.parametrize(
    ("who", "scopes", "bound", "code"),
    [
        ("olga", ["inference"], False, "token.missing_scope"),
        ("adam", ["read"], True, "token.tenant_bound"),
        ("alice", ["read"], False, "permission_denied"),
    ],
)
def test_tokens_without_the_right_are_forbidden(fleet, who, scopes, bound, code):
    client = fleet.token_client(who, scopes, tenant=fleet.acme if bound else None)
    response = client.get("/metrics")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == code


def test_openmetrics_when_the_scraper_asks_for_it(fleet):
    response = fleet.client("olga").get(
        "/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0"
    )
    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    families = {f.name: f for f in openmetrics_families(response.content.decode())}
    assert families["adapter_eviction_count"].type == "counter"
    (sample,) = [
        s for s in families["adapter_eviction_count"].samples if s.labels["engine"] == "e1"
    ]
    assert sample.value == 3


def test_only_reads(fleet):
    assert fleet.client("olga").post("/metrics").status_code == 405
