"""Fleet metrics for Prometheus: a custom collector that reads the database once per scrape.

Five queries whatever the fleet's size (aggregates grouped by engine, never one per row), and
labels bounded by engines x tiers/kinds: never per request or per version.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Sum
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from workers.models import (
    AlarmKind,
    Engine,
    EngineAlarm,
    EngineState,
    FleetAction,
    FleetActionKind,
    Residency,
    ResidencyState,
)

# Observed residency tiers, hottest last; `absent` rows hold nothing.
TIERS = (
    ResidencyState.REGISTERED,
    ResidencyState.RESIDENT_CPU,
    ResidencyState.RESIDENT_GPU,
    ResidencyState.PINNED,
)
GPU_TIERS = (ResidencyState.RESIDENT_GPU, ResidencyState.PINNED)
EVICTING = (FleetActionKind.EVICT, FleetActionKind.UNLOAD)
LATENCY_QUANTILES = (0.5, 0.95, 0.99)
LATENCY_WINDOW_S = 3600


@dataclass
class FleetSnapshot:
    """What one scrape read, keyed by engine id."""

    engines: list[tuple[int, str, str]]
    resident: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    actions: dict[tuple[int, str], int] = field(default_factory=dict)
    latencies: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    alarms: dict[tuple[int, str], int] = field(default_factory=dict)


def fleet_snapshot(*, now: datetime | None = None) -> FleetSnapshot:
    now = now or timezone.now()
    snapshot = FleetSnapshot(
        engines=list(Engine.objects.order_by("name").values_list("id", "name", "state"))
    )
    for row in (
        Residency.objects.filter(observed_state__in=TIERS)
        .values("engine_id", "observed_state")
        .annotate(n=Count("id"), size=Sum("version__size_bytes"))
        .order_by()
    ):
        snapshot.resident[(row["engine_id"], row["observed_state"])] = (row["n"], row["size"] or 0)
    for action in (
        FleetAction.objects.filter(ok=True, kind__in=(FleetActionKind.LOAD, *EVICTING))
        .values("engine_id", "kind")
        .annotate(n=Count("id"))
        .order_by()
    ):
        kind = "evict" if action["kind"] in EVICTING else "load"
        key = (action["engine_id"], kind)
        snapshot.actions[key] = snapshot.actions.get(key, 0) + action["n"]
    # Bounded by the load rate over one hour (the thrash alarm fires long before it is large).
    for engine_id, latency in FleetAction.objects.filter(
        kind=FleetActionKind.LOAD,
        ok=True,
        latency_ms__isnull=False,
        created_at__gt=now - timedelta(seconds=LATENCY_WINDOW_S),
        created_at__lte=now,
    ).values_list("engine_id", "latency_ms"):
        if latency is not None:  # always, by the filter; narrows the nullable column's type
            snapshot.latencies[engine_id].append(latency)
    for alarm in (
        EngineAlarm.objects.filter(cleared_at__isnull=True)
        .values("engine_id", "kind")
        .annotate(n=Count("id"))
        .order_by()
    ):
        snapshot.alarms[(alarm["engine_id"], alarm["kind"])] = alarm["n"]
    return snapshot


def nearest_rank(sorted_values: list[float], q: float) -> float:
    """The nearest-rank quantile: the smallest value with at least q of the values at or below it."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def fleet_families(snapshot: FleetSnapshot) -> Iterator[Metric]:
    gpu = GaugeMetricFamily(
        "adapter_gpu_resident_count",
        "Adapter versions observed in GPU slots (resident_gpu or pinned)",
        labels=["engine"],
    )
    resident = GaugeMetricFamily(
        "adapter_resident_count",
        "Adapter versions observed on the engine per tier",
        labels=["engine", "tier"],
    )
    memory = GaugeMetricFamily(
        "adapter_memory_bytes",
        "Sum of the size_bytes of the adapter versions observed on the engine per tier",
        labels=["engine", "tier"],
    )
    evictions = CounterMetricFamily(
        "adapter_eviction_count",
        "Successful evict and unload actions on the engine (the fleet action log)",
        labels=["engine"],
    )
    loads = CounterMetricFamily(
        "adapter_load_count", "Successful adapter loads on the engine", labels=["engine"]
    )
    latency = SummaryMetricFamily(
        "adapter_load_latency_ms",
        "Successful adapter load latency in ms over the last hour (a sliding window: _count and "
        "_sum cover that hour and may go down)",
        labels=["engine"],
    )
    thrashing = GaugeMetricFamily(
        "lora_portal_engine_thrashing",
        "1 while a thrash alarm is open on the engine",
        labels=["engine"],
    )
    up = GaugeMetricFamily(
        "lora_portal_engine_up",
        "1 when the engine is up; the state label says which state it is in",
        labels=["engine", "state"],
    )
    alarms = GaugeMetricFamily(
        "lora_portal_alarms_open", "Open alarms on the engine per kind", labels=["engine", "kind"]
    )
    for engine_id, name, state in snapshot.engines:
        gpu_count = 0
        for tier in TIERS:
            count, size = snapshot.resident.get((engine_id, tier), (0, 0))
            resident.add_metric([name, tier], count)
            memory.add_metric([name, tier], size)
            gpu_count += count if tier in GPU_TIERS else 0
        gpu.add_metric([name], gpu_count)
        evictions.add_metric([name], snapshot.actions.get((engine_id, "evict"), 0))
        loads.add_metric([name], snapshot.actions.get((engine_id, "load"), 0))
        values = sorted(snapshot.latencies.get(engine_id, []))
        latency.add_metric([name], len(values), sum(values))
        for q in LATENCY_QUANTILES if values else ():
            latency.samples.append(
                Sample(
                    "adapter_load_latency_ms",
                    {"engine": name, "quantile": str(q)},
                    nearest_rank(values, q),
                )
            )
        thrashing.add_metric([name], 1 if snapshot.alarms.get((engine_id, AlarmKind.THRASH)) else 0)
        up.add_metric([name, state], 1 if state == EngineState.UP else 0)
        for kind in AlarmKind.values:
            alarms.add_metric([name, kind], snapshot.alarms.get((engine_id, kind), 0))
    yield from (gpu, resident, memory, evictions, loads, latency, thrashing, up, alarms)


class FleetCollector(Collector):
    """Register on a per-scrape CollectorRegistry (see `fleet_registry`), not the global one, so
    nothing else (a test, another exporter) runs its queries by accident."""

    def collect(self) -> Iterator[Metric]:
        yield from fleet_families(fleet_snapshot())


# Collectors of the layers above the fleet, scraped beside its own on /metrics: the gateway adds
# its per-adapter request metrics in GatewayConfig.ready() (the fleet never imports it).
_collectors_above: list[Callable[[], Collector]] = []


def add_collector(factory: Callable[[], Collector]) -> None:
    """Scrape `factory()`'s families with the fleet's (once per factory, however often called)."""
    if factory not in _collectors_above:
        _collectors_above.append(factory)


def fleet_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector())
    for factory in _collectors_above:
        registry.register(factory())
    return registry
