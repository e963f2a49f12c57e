"""Per-adapter gateway metrics: /metrics values equal what the Recorder recorded (histograms
cumulative, hit ratio, no name shared with the fleet's families), the same access rules as the
fleet metrics, and the per-second/per-minute series behind the live pages and their REST endpoint.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.models import Adapter
from gateway.metrics import GatewayCollector, gateway_snapshot
from gateway.selectors import adapter_series
from tests.fixtures.shared_counts import forget_demand
from tests.gateway.recording import gw_redis, measure, record, version  # noqa: F401
from workers import shared_state
from workers.metrics import FleetCollector

pytestmark = pytest.mark.usefixtures("gw_redis")

TTFT_EDGES: tuple[str, ...] = (
    "5.0",
    "10.0",
    "25.0",
    "50.0",
    "100.0",
    "250.0",
    "500.0",
    "1000.0",
    "2500.0",
)
TTFT_EDGES += ("5000.0", "10000.0", "30000.0", "+Inf")


@pytest.fixture
def recorded(world):
    """acme/support@1: gpu, cpu, cold; acme/support@2: gpu and a failed cold request;
    globex/legal@1: cpu; acme's base model: one request."""
    s1, s2, legal = version(world.support, 1), version(world.support, 2), version(world.legal, 1)
    now = time.time()
    record(
        measure(s1, at=now, served_from="gpu", ttft=4, e2e=20, tokens_in=10, tokens_out=5),
        measure(s1, at=now, served_from="cpu", ttft=30, e2e=300, tokens_in=20, tokens_out=7),
        measure(s1, at=now, served_from="cold", ttft=900, e2e=1200, load=800, tokens_in=1),
        measure(s2, at=now, served_from="gpu", ttft=7, e2e=60, tokens_in=3, tokens_out=2),
        measure(s2, at=now, served_from="cold", ok=False, e2e=50_000, load=1500, tokens_out=0),
        measure(legal, at=now, served_from="cpu", ttft=11, e2e=70),
        measure(None, at=now, tenant=("acme", world.acme.id), ttft=12, e2e=40),
    )
    return world


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples, name: str, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


def scrape(world, who: str = "olga") -> tuple[str, dict]:
    response = world.client(who).get("/metrics")
    assert response.status_code == 200, response.content
    text = response.content.decode()
    return text, parse(text)


SUPPORT1 = {"tenant": "acme", "adapter": "support", "version": "support@1"}
SUPPORT2 = {"tenant": "acme", "adapter": "support", "version": "support@2"}
LEGAL1 = {"tenant": "globex", "adapter": "legal", "version": "legal@1"}
BASE = {"tenant": "acme", "adapter": "", "version": "tiny-llama"}


def test_counters_equal_what_was_recorded(recorded):
    _, s = scrape(recorded)
    for labels, requests, errors in ((SUPPORT1, 3, 0), (SUPPORT2, 2, 1), (LEGAL1, 1, 0)):
        assert value(s, "adapter_requests_total", **labels) == requests
        assert value(s, "adapter_errors_total", **labels) == errors
    assert value(s, "adapter_requests_total", **BASE) == 1
    assert value(s, "cold_adapter_request_count_total", **SUPPORT1) == 1
    assert value(s, "cold_adapter_request_count_total", **SUPPORT2) == 1
    assert value(s, "cold_adapter_request_count_total", **LEGAL1) == 0
    assert value(s, "adapter_cache_hits_total", **SUPPORT1, tier="gpu") == 1
    assert value(s, "adapter_cache_hits_total", **SUPPORT1, tier="cpu") == 1
    assert value(s, "adapter_tokens_total", **SUPPORT1, direction="in") == 31
    assert value(s, "adapter_tokens_total", **SUPPORT1, direction="out") == 17
    assert value(s, "adapter_tokens_total", **SUPPORT2, direction="out") == 2
    assert value(s, "adapter_request_load_latency_ms_count", **SUPPORT1) == 1
    assert value(s, "adapter_request_load_latency_ms_sum", **SUPPORT1) == 800
    assert value(s, "adapter_request_load_latency_ms_sum", **SUPPORT2) == 1500
    # The base model has no cache: no cold count, no hit ratio, no load latency.
    assert ("cold_adapter_request_count_total", frozenset(BASE.items())) not in s


def test_hit_ratio_is_gpu_and_cpu_hits_over_requests_per_adapter(recorded):
    _, s = scrape(recorded)
    # support: @1 gpu+cpu of 3, @2 gpu of 2 -> 3 of 5, whatever the versions
    assert value(s, "adapter_cache_hit_ratio", tenant="acme", adapter="support") == 0.6
    assert value(s, "adapter_cache_hit_ratio", tenant="globex", adapter="legal") == 1.0
    assert not any(
        name == "adapter_cache_hit_ratio" and dict(labels).get("adapter") == ""
        for name, labels in s
    )


def _buckets(s, name: str, **labels) -> list[float]:
    return [value(s, f"{name}_bucket", **labels, le=le) for le in TTFT_EDGES]


def test_histograms_are_cumulative_with_count_and_sum(recorded):
    _, s = scrape(recorded)
    support = {"tenant": "acme", "adapter": "support"}
    # TTFT 4, 30, 900 (@1) and 7 (@2); the failed request has none.
    assert _buckets(s, "adapter_ttft_ms", **support) == [1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4]
    assert value(s, "adapter_ttft_ms_count", **support) == 4
    assert value(s, "adapter_ttft_ms_sum", **support) == 4 + 30 + 900 + 7
    # End to end 20, 300, 1200, 60 and 50,000 (beyond the last edge: only in +Inf).
    e2e = _buckets(s, "adapter_request_duration_ms", **support)
    assert e2e == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 4, 5]
    assert value(s, "adapter_request_duration_ms_count", **support) == 5
    assert value(s, "adapter_request_duration_ms_sum", **support) == 20 + 300 + 1200 + 60 + 50_000
    base = {"tenant": "acme", "adapter": ""}
    assert value(s, "adapter_ttft_ms_bucket", **base, le="25.0") == 1
    for family in ("adapter_ttft_ms", "adapter_request_duration_ms"):
        for labels in (support, base, {"tenant": "globex", "adapter": "legal"}):
            counts = _buckets(s, family, **labels)
            assert counts == sorted(counts), (family, labels)
            assert counts[-1] == value(s, f"{family}_count", **labels)


def test_labels_are_per_tenant_adapter_and_version_never_per_request(recorded):
    text, _ = scrape(recorded)
    gateway = {f.name for f in GatewayCollector().collect()}
    labels = {
        label
        for family in text_string_to_metric_families(text)
        if family.name in gateway
        for sample in family.samples
        for label in sample.labels
    }
    assert labels == {"tenant", "adapter", "version", "tier", "direction", "le"}
    assert "cpu-1" not in text  # the engine a request went to is not a label here


def test_no_family_name_is_shared_with_the_fleet(recorded):
    fleet = {f.name for f in FleetCollector().collect()}
    gateway = {f.name for f in GatewayCollector().collect()}
    assert "adapter_load_latency_ms" in fleet and "adapter_request_load_latency_ms" in gateway
    assert not fleet & gateway
    text, _ = scrape(recorded)
    names = [f.name for f in text_string_to_metric_families(text)]
    assert len(names) == len(set(names))
    assert fleet | gateway == set(names)


def test_one_round_trip_per_scrape(recorded, monkeypatch):
    calls = []
    real = shared_state.client()

    class Spy:
        def pipeline(self, **kwargs):
            pipe = real.pipeline(**kwargs)
            execute = pipe.execute

            def counted(*args, **kw):
                calls.append("execute")
                return execute(*args, **kw)

            monkeypatch.setattr(pipe, "execute", counted)
            return pipe

        def __getattr__(self, name):
            calls.append(name)
            return getattr(real, name)

    monkeypatch.setattr(shared_state, "client", Spy)
    assert gateway_snapshot().counters
    assert calls == ["execute"]


def test_a_redis_outage_costs_only_the_gateway_families(recorded, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    text, s = scrape(recorded)
    assert value(s, "lora_portal_gateway_metrics_up") == 0
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "adapter_requests" not in names
    assert {f.name for f in FleetCollector().collect()} < names  # the fleet still answers


def test_up_is_one_when_redis_answers(recorded):
    _, s = scrape(recorded)
    assert value(s, "lora_portal_gateway_metrics_up") == 1


@pytest.mark.parametrize("who", ["alice", "vera", "charlie", "rita"])
def test_tenant_users_and_reviewers_are_forbidden(recorded, who):
    response = recorded.client(who).get("/metrics")
    assert response.status_code == 403
    assert b"adapter_requests_total" not in response.content


def test_anonymous_is_asked_to_authenticate(recorded):
    response = recorded.client(None).get("/metrics")
    assert response.status_code == 401
    assert b"adapter_requests_total" not in response.content


def test_an_operators_token_and_an_admin_read_it(recorded):
    response = recorded.token_client("olga", ["read"]).get("/metrics")
    assert response.status_code == 200
    assert value(parse(response.content.decode()), "adapter_requests_total", **SUPPORT1) == 3
    _, s = scrape(recorded, "adam")
    assert value(s, "adapter_requests_total", **SUPPORT2) == 2


# --- the time series of the live pages ---


@pytest.fixture
def series_world(world):
    billing = Adapter.objects.create(tenant=world.acme, name="billing", base_model=world.base)
    return world, version(world.support, 1), version(world.support, 2), version(billing, 1)


def test_minute_series_per_adapter_all_versions_together(series_world):
    world, s1, s2, other = series_world
    minute = (int(time.time()) // 60 - 3) * 60  # three minutes ago, at the minute's start
    record(
        measure(s1, at=minute + 1, served_from="gpu", ttft=10),
        measure(s2, at=minute + 2, served_from="cold", ttft=30, load=500),
        measure(s2, at=minute + 59, served_from="cpu", ok=False),
        measure(s1, at=minute + 120, served_from="cold", ttft=100),
        measure(other, at=minute + 1, served_from="cold"),  # another adapter: not in the series
        measure(version(world.legal, 1), at=minute + 1),  # another tenant
    )
    points = adapter_series(tenant="acme", adapter="support", minutes=4, now=minute + 150)
    assert [p.t for p in points] == [minute + 60 * k for k in range(-1, 3)]
    before, first, empty, third = points  # the last one is the current minute
    assert (before.requests, before.hit_ratio, before.ttft_ms, before.cold) == (0, None, None, 0)
    assert (first.requests, first.errors, first.cold) == (3, 1, 1)
    assert first.hit_ratio == pytest.approx(2 / 3)
    assert first.ttft_ms == 20.0  # (10 + 30) / 2: the failed request has no first token
    assert (empty.requests, empty.hit_ratio) == (0, None)
    assert (third.requests, third.cold, third.hit_ratio, third.ttft_ms) == (1, 1, 0.0, 100.0)


def test_second_series_counts_requests_errors_and_ttft(series_world):
    _, s1, s2, _ = series_world
    now = int(time.time())
    record(
        measure(s1, at=now - 3, ttft=12.5),
        measure(s2, at=now - 3, ttft=7.5, served_from="cpu"),
        measure(s1, at=now - 1, ok=False, served_from="cold"),
    )
    points = adapter_series(tenant="acme", adapter="support", seconds=5, now=now)
    assert [p.t for p in points] == list(range(now - 4, now + 1))
    assert [p.requests for p in points] == [0, 2, 0, 1, 0]
    assert [p.errors for p in points] == [0, 0, 0, 1, 0]
    assert points[1].ttft_ms == 10.0
    # Where each request was served is recorded per minute; per second only if the recorder
    # writes the tiers there too (see below): never a made-up zero.
    assert points[1].hit_ratio in (None, 1.0) and points[3].cold in (None, 1)


def test_second_series_hit_ratio_and_cold_when_the_hash_has_tiers(series_world):
    now = int(time.time())
    client = shared_state.client()
    client.hset(
        f"lp:gwm:sec:{now}",
        mapping={
            "acme|support|support@1|requests": 3,
            "acme|support|support@1|gpu": 1,
            "acme|support|support@1|cpu": 1,
            "acme|support|support@1|cold": 1,
            "acme|support|support@2|requests": 1,
            "acme|support|support@2|requests2": 1,  # unknown field: ignored
            "acme|support|support@2|cold": 1,
        },
    )
    client.hset(f"lp:gwm:sec:{now - 1}", mapping={"acme|support|support@1|requests": 2})
    older, current = adapter_series(tenant="acme", adapter="support", seconds=2, now=now)
    assert (current.requests, current.cold, current.hit_ratio) == (4, 2, 0.5)
    assert (older.requests, older.cold, older.hit_ratio) == (2, None, None)


def test_series_reads_in_one_round_trip(series_world, monkeypatch):
    calls = []
    real = shared_state.client()

    class Spy:
        def pipeline(self, **kwargs):
            calls.append("pipeline")
            return real.pipeline(**kwargs)

        def __getattr__(self, name):
            calls.append(name)
            return getattr(real, name)

    monkeypatch.setattr(shared_state, "client", Spy)
    assert len(adapter_series(tenant="acme", adapter="support", minutes=60)) == 60
    assert calls == ["pipeline"]


@pytest.mark.parametrize(
    ("kwargs", "ok"),
    [
        ({"seconds": 601}, False),
        ({"minutes": 2880}, True),
        ({"minutes": 2881}, False),
        ({}, False),
        ({"seconds": 1, "minutes": 1}, False),
    ],
)
def test_series_windows_are_bounded_by_what_redis_keeps(series_world, kwargs, ok):
    from core.errors import ApplicationError

    if ok:
        assert len(adapter_series(tenant="acme", adapter="support", **kwargs)) == 2880
    else:
        with pytest.raises(ApplicationError) as err:
            adapter_series(tenant="acme", adapter="support", **kwargs)
        assert err.value.code == "metrics.bad_window"


def test_the_metrics_endpoint_serves_the_series_to_whoever_views_the_adapter(series_world):
    world, s1, _, _ = series_world
    record(measure(s1, at=time.time(), ttft=20))
    url = "/api/v1/tenants/acme/adapters/support/metrics/"
    body = world.client("vera").get(url).json()
    assert (body["tenant"], body["adapter"], body["window"], body["step_seconds"]) == (
        "acme",
        "support",
        "120s",
        1,
    )
    assert len(body["points"]) == 120
    assert sum(p["requests"] for p in body["points"][-3:]) == 1
    minutes = world.client("vera").get(url, {"window": "60m"}).json()
    assert (len(minutes["points"]), minutes["step_seconds"]) == (60, 60)
    assert minutes["points"][-1]["requests"] == 1
    assert minutes["points"][-1]["hit_ratio"] == 1.0
    assert set(minutes["points"][-1]) == {"t", "requests", "errors", "cold", "hit_ratio", "ttft_ms"}


@pytest.mark.parametrize("window", ["601s", "2881m", "10h", "0s", "-5m", "5"])
def test_a_bad_window_is_refused(series_world, window):
    response = (
        series_world[0]
        .client("alice")
        .get("/api/v1/tenants/acme/adapters/support/metrics/", {"window": window})
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "metrics.bad_window"


def test_another_tenants_adapter_is_not_found(series_world):
    world = series_world[0]
    response = world.client("charlie").get("/api/v1/tenants/acme/adapters/support/metrics/")
    assert response.status_code == 404
    response = world.client("alice").get("/api/v1/tenants/globex/adapters/legal/metrics/")
    assert response.status_code == 404


def test_the_recorder_leaves_a_loads_leader_out_of_the_pool_history(world):
    """Two requests waited for one load (single-flight): both count as cold in the metrics.
    The one that led the load is already in the pool's demand history, marked, by the load
    itself (workers.desired.request_load); the recorder adds only the others, unmarked, so each
    request is in the history once."""
    import dataclasses
    import uuid

    s1 = version(world.support, 1)
    pool = f"p-{uuid.uuid4().hex[:6]}"
    now = time.time()
    leader, waiter, hit = (
        dataclasses.replace(measure(s1, at=now + i, served_from=where), pool=pool, caused_load=c)
        for i, (where, c) in enumerate((("cold", True), ("cold", False), ("gpu", False)))
    )
    try:
        record(leader, waiter, hit)
        history = shared_state.demand_history(pool)
        # the waiter and the hit, unmarked; the leader was recorded by its load, not here
        assert [(d.name, d.missed) for d in history] == [(s1.served_name, False)] * 2
        assert gateway_snapshot().counters[("acme", "support", "support@1")]["cold"] == 2
    finally:
        forget_demand([pool])


def test_a_traced_requests_buckets_carry_its_trace_as_their_exemplar(world):
    """OpenMetrics: the TTFT and load-wait buckets a sampled request fell in name its trace, so a
    slow bucket opens the trace; an untraced request later in the same bucket leaves it there."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )

    s1 = version(world.support, 1)
    now = time.time()
    trace_id = "ab" * 16
    traced = replace(measure(s1, at=now, served_from="cold", ttft=900, load=800), trace_id=trace_id)
    record(traced, measure(s1, at=now + 1, served_from="cold", ttft=950, load=700))
    response = world.client("olga").get(
        "/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0"
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    samples = {
        (s.name, s.labels.get("le")): s
        for family in openmetrics_families(response.content.decode())
        if family.name in ("adapter_ttft_ms", "adapter_load_wait_ms")
        for s in family.samples
        if s.labels.get("adapter") == "support"
    }
    ttft = samples[("adapter_ttft_ms_bucket", "1000.0")]
    assert ttft.value == 2
    assert ttft.exemplar is not None and ttft.exemplar.labels == {"trace_id": trace_id}
    assert ttft.exemplar.value == 900.0
    load = samples[("adapter_load_wait_ms_bucket", "1000.0")]
    assert load.value == 2
    assert load.exemplar is not None and load.exemplar.labels == {"trace_id": trace_id}
    assert load.exemplar.value == 800.0
    assert samples[("adapter_ttft_ms_bucket", "500.0")].exemplar is None
