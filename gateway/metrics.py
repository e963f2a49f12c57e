"""Per-adapter request metrics for Prometheus: a collector over the gateway's Redis aggregates.

One pipelined round trip per scrape (HGETALLs of the hashes gateway.recorder writes), and
labels bounded by tenants x adapters (x versions, which are few per adapter): never per request.
`adapter=""` is the base model itself (its `version` label is the base model's served name).

Names beside the fleet's (workers/metrics.py), which are per engine:
- `adapter_load_latency_ms{engine}` (fleet) is how long the engine took to load a version;
- `adapter_request_load_latency_ms{tenant,adapter,version}` (here) is how long cold requests
  waited for a load, single-flight waiters included; `adapter_load_wait_ms{tenant,adapter}` is
  the same wait as a histogram.

The TTFT and load-wait histograms' buckets carry exemplars in the OpenMetrics exposition (the
scraper asks for it): the latest traced request that fell in each bucket, `trace_id` as its
label, so a slow bucket opens its trace (docs/observability.md).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from gateway.limits import CLASSES_KEY
from gateway.recorder import TTFT_BUCKETS_MS
from workers import shared_state
from workers.redis_contract.keys import load_key

log = logging.getLogger(__name__)

COUNTERS_KEY = "lp:gwm:counters"
TTFT_KEY = "lp:gwm:ttft"
E2E_KEY = "lp:gwm:e2e"
LOAD_KEY = "lp:gwm:load"
TTFT_EXEMPLARS_KEY = "lp:gwm:ttft:ex"
LOAD_EXEMPLARS_KEY = "lp:gwm:load:ex"
HIT_TIERS = ("gpu", "cpu")
BUCKET_EDGES = tuple(str(edge) for edge in TTFT_BUCKETS_MS) + ("+Inf",)

VersionKey = tuple[str, str, str]  # tenant, adapter, version
AdapterKey = tuple[str, str]  # tenant, adapter


@dataclass
class GatewaySnapshot:
    """What one scrape read: counters per version, histogram buckets per adapter."""

    counters: dict[VersionKey, dict[str, float]] = field(default_factory=dict)
    ttft: dict[AdapterKey, dict[str, int]] = field(default_factory=dict)
    e2e: dict[AdapterKey, dict[str, int]] = field(default_factory=dict)
    load: dict[AdapterKey, dict[str, int]] = field(default_factory=dict)
    ttft_exemplars: dict[AdapterKey, dict[str, Exemplar]] = field(default_factory=dict)
    load_exemplars: dict[AdapterKey, dict[str, Exemplar]] = field(default_factory=dict)


def _number(raw: bytes) -> float:
    value = float(raw)
    return int(value) if value.is_integer() else value


def parse_counters(raw: dict[bytes, bytes]) -> dict[VersionKey, dict[str, float]]:
    """`tenant|adapter|version|what` -> {(tenant, adapter, version): {what: value}}."""
    out: dict[VersionKey, dict[str, float]] = defaultdict(dict)
    for name, value in raw.items():
        head, _, what = name.decode().rpartition("|")
        parts = head.split("|", 2)
        if len(parts) != 3 or not what:
            continue  # not a field this module knows how to read
        tenant, adapter, version = parts
        out[(tenant, adapter, version)][what] = _number(value)
    return dict(out)


def parse_buckets(raw: dict[bytes, bytes]) -> dict[AdapterKey, dict[str, int]]:
    """`tenant|adapter|le` -> {(tenant, adapter): {le: count in that bucket alone}}."""
    out: dict[AdapterKey, dict[str, int]] = defaultdict(dict)
    for name, value in raw.items():
        parts = name.decode().split("|")
        if len(parts) != 3 or parts[2] not in BUCKET_EDGES:
            continue
        out[(parts[0], parts[1])][parts[2]] = int(value)
    return dict(out)


def parse_exemplars(raw: dict[bytes, bytes]) -> dict[AdapterKey, dict[str, Exemplar]]:
    """`tenant|adapter|le` -> `trace_id value unix_time` as {(tenant, adapter): {le: exemplar}}."""
    out: dict[AdapterKey, dict[str, Exemplar]] = defaultdict(dict)
    for name, value in raw.items():
        parts, fields = name.decode().split("|"), value.decode().split()
        if len(parts) != 3 or parts[2] not in BUCKET_EDGES or len(fields) != 3:
            continue
        trace_id, ms, at = fields
        out[(parts[0], parts[1])][parts[2]] = Exemplar({"trace_id": trace_id}, float(ms), float(at))
    return dict(out)


def gateway_snapshot(client: redis.Redis | None = None) -> GatewaySnapshot:
    pipe = (client or shared_state.client()).pipeline(transaction=False)
    keys = (COUNTERS_KEY, TTFT_KEY, E2E_KEY, LOAD_KEY, TTFT_EXEMPLARS_KEY, LOAD_EXEMPLARS_KEY)
    for key in keys:
        pipe.hgetall(key)
    counters, ttft, e2e, load, ttft_ex, load_ex = pipe.execute()
    return GatewaySnapshot(
        counters=parse_counters(counters),
        ttft=parse_buckets(ttft),
        e2e=parse_buckets(e2e),
        load=parse_buckets(load),
        ttft_exemplars=parse_exemplars(ttft_ex),
        load_exemplars=parse_exemplars(load_ex),
    )


def cumulative(
    per_bucket: dict[str, int], exemplars: dict[str, Exemplar] | None = None
) -> list[Any]:
    """Redis holds each bucket's own count; Prometheus wants each `le` to include the ones below.
    A bucket with an exemplar is a triple (le, count, exemplar)."""
    running, out = 0, []
    for edge in BUCKET_EDGES:
        running += per_bucket.get(edge, 0)
        le = edge if edge == "+Inf" else floatToGoString(float(edge))
        exemplar = (exemplars or {}).get(edge)
        out.append((le, running, exemplar) if exemplar is not None else (le, running))
    return out


def _per_adapter_sum(
    counters: dict[VersionKey, dict[str, float]], what: str
) -> dict[AdapterKey, float]:
    sums: dict[AdapterKey, float] = defaultdict(float)
    for (tenant, adapter, _version), values in counters.items():
        sums[(tenant, adapter)] += values.get(what, 0)
    return sums


def _histogram(
    name: str,
    documentation: str,
    buckets: dict[AdapterKey, dict[str, int]],
    sums: dict[AdapterKey, float],
    exemplars: dict[AdapterKey, dict[str, Exemplar]] | None = None,
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=["tenant", "adapter"])
    for key in sorted(buckets):
        per_bucket = cumulative(buckets[key], (exemplars or {}).get(key))
        family.add_metric(list(key), per_bucket, sums.get(key, 0))
    return family


def gateway_families(snapshot: GatewaySnapshot) -> Iterator[Metric]:
    labels = ["tenant", "adapter", "version"]
    requests = CounterMetricFamily(
        "adapter_requests_total",
        "Requests the gateway forwarded, per adapter version",
        labels=labels,
    )
    errors = CounterMetricFamily(
        "adapter_errors_total",
        "Forwarded requests that failed (engine error status or a broken stream)",
        labels=labels,
    )
    cold = CounterMetricFamily(
        "cold_adapter_request_count",
        "Requests that waited for their adapter version to be loaded on an engine",
        labels=labels,
    )
    hits = CounterMetricFamily(
        "adapter_cache_hits",
        "Requests served by an engine that already held the version, per tier (gpu or cpu)",
        labels=[*labels, "tier"],
    )
    tokens = CounterMetricFamily(
        "adapter_tokens",
        "Tokens per adapter version: direction=in (prompt) or out (completion)",
        labels=[*labels, "direction"],
    )
    load = SummaryMetricFamily(
        "adapter_request_load_latency_ms",
        "How long cold requests waited for the load (count = cold requests); the fleet's "
        "adapter_load_latency_ms{engine} is the engine-side load time",
        labels=labels,
    )
    ratio = GaugeMetricFamily(
        "adapter_cache_hit_ratio",
        "Requests served from a GPU slot or the CPU cache / all requests, per adapter, since the "
        "counters began (rate() adapter_cache_hits_total for a window)",
        labels=["tenant", "adapter"],
    )
    per_adapter: dict[AdapterKey, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for key in sorted(snapshot.counters):
        values = snapshot.counters[key]
        tenant, adapter, _version = key
        requests.add_metric(list(key), values.get("requests", 0))
        errors.add_metric(list(key), values.get("errors", 0))
        tokens.add_metric([*key, "in"], values.get("tokens_in", 0))
        tokens.add_metric([*key, "out"], values.get("tokens_out", 0))
        if not adapter:
            continue  # the base model has no cache to hit or miss
        cold.add_metric(list(key), values.get("cold", 0))
        load.add_metric(list(key), int(values.get("cold", 0)), values.get("load_ms_sum", 0))
        for tier in HIT_TIERS:
            hits.add_metric([*key, tier], values.get(tier, 0))
        totals = per_adapter[(tenant, adapter)]
        totals[0] += sum(values.get(tier, 0) for tier in HIT_TIERS)
        totals[1] += values.get("requests", 0)
    for (tenant, adapter), (hit, total) in sorted(per_adapter.items()):
        if total:
            ratio.add_metric([tenant, adapter], hit / total)
    ttft = _histogram(
        "adapter_ttft_ms",
        "Time to first token in ms, per adapter (successful requests)",
        snapshot.ttft,
        _per_adapter_sum(snapshot.counters, "ttft_ms_sum"),
        snapshot.ttft_exemplars,
    )
    load_wait = _histogram(
        "adapter_load_wait_ms",
        "How long cold requests waited for their version's load in ms, per adapter",
        snapshot.load,
        _per_adapter_sum(snapshot.counters, "load_ms_sum"),
        snapshot.load_exemplars,
    )
    e2e = _histogram(
        "adapter_request_duration_ms",
        "End-to-end request time in ms at the gateway, per adapter",
        snapshot.e2e,
        _per_adapter_sum(snapshot.counters, "e2e_ms_sum"),
    )
    yield from (requests, errors, cold, hits, ratio, tokens, load, ttft, load_wait, e2e)


def class_families(client: redis.Redis | None = None) -> Iterator[Metric]:
    """Per service class (docs/classes.md), every replica's: requests shed, requests that waited
    for their class's share and how long, and the slots each class holds on each engine now."""
    from workers.models import Engine

    client = client or shared_state.client()
    engines = sorted(Engine.objects.values_list("name", flat=True))
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(CLASSES_KEY)
    for name in engines:
        pipe.hgetall(load_key(name))
    counts, *loads = pipe.execute()
    shed = CounterMetricFamily(
        "service_class_shed",
        "Requests answered 503 shed_for_capacity, per service class",
        labels=["class"],
    )
    waited = SummaryMetricFamily(
        "service_class_queue_seconds",
        "Requests that waited for their class's share of a saturated engine before going in, "
        "and their seconds waiting, per service class",
        labels=["class"],
    )
    slots = GaugeMetricFamily(
        "service_class_slots",
        "Slots (sequences) each service class holds on each engine now, every replica's",
        labels=["engine", "class"],
    )
    fields = {k.decode(): _number(v) for k, v in counts.items()}
    classes = sorted({f.split(":", 1)[1] for f in fields})
    for name in classes:
        shed.add_metric([name], fields.get(f"shed:{name}", 0))
        waited.add_metric(
            [name], int(fields.get(f"held:{name}", 0)), fields.get(f"held_s:{name}", 0)
        )
    for engine, load in zip(engines, loads, strict=True):
        for name, held in sorted(shared_state.class_slots_of(load).items()):
            slots.add_metric([engine, name], held)
    yield from (shed, waited, slots)


class GatewayCollector(Collector):
    """Register on a per-scrape registry (workers.metrics.fleet_registry). A Redis outage costs
    these families, not the fleet's: the scrape still answers, with `..._up 0`."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "lora_portal_gateway_metrics_up",
            "1 when the gateway's request metrics could be read from Redis",
        )
        try:
            snapshot = gateway_snapshot()
        except redis.RedisError as exc:
            log.warning("gateway metrics unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from gateway_families(snapshot)
        try:
            yield from class_families()
        except redis.RedisError as exc:
            log.warning("service class metrics unavailable: %s", exc)
