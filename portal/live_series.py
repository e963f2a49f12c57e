"""The live pages' numbers: the gateway's per-second and per-minute hashes, grouped for charts.

gateway.recorder writes `lp:gwm:sec:<s>` (kept 10 minutes) and `lp:gwm:min:<m>` (2 days) with
fields `tenant|adapter|version|what`. Here they become raw sums per version (never ratios, so
seconds fold into minutes and versions into fleets by adding); the browser derives the ratios.
Evictions come from the fleet's action log (workers.FleetAction), the same rows /metrics counts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import redis

from workers import shared_state

SECOND_PREFIX = "lp:gwm:sec:"
MINUTE_PREFIX = "lp:gwm:min:"
# Sums the charts need, per version and period (gateway.recorder.Recorder.add writes them).
CHART_FIELDS = (
    "requests",
    "errors",
    "gpu",
    "cpu",
    "cold",
    "ttft_ms_sum",
    "ttft_count",
    "load_ms_sum",
)
HISTORY_MINUTES = 60
HISTORY_SECONDS = 120
# How far back a socket that (re)joins is brought up to date: the per-second hashes' lifetime
# (gateway.recorder.SECOND_TTL_S); older seconds are in the minutes a reload shows.
CATCH_UP_SECONDS = 600

Sums = dict[str, float]
TenantSums = dict[str, dict[str, Sums]]  # tenant slug -> version label ("support@3") -> sums


def _number(raw: bytes | str) -> float:
    value = float(raw)
    return int(value) if value.is_integer() else round(value, 3)


def parse_period(raw: dict[bytes, bytes]) -> TenantSums:
    """One period's hash -> sums per tenant and adapter version. The base model's own requests
    (empty adapter) and fields the charts do not draw are left out."""
    out: TenantSums = defaultdict(lambda: defaultdict(dict))
    for name, value in raw.items():
        parts = (name.decode() if isinstance(name, bytes) else name).split("|")
        if len(parts) != 4 or not parts[1] or parts[3] not in CHART_FIELDS:
            continue
        tenant, _adapter, version, what = parts
        out[tenant][version][what] = _number(value)
    return {tenant: dict(versions) for tenant, versions in out.items()}


def add_sums(into: Sums, more: Sums) -> Sums:
    for what, value in more.items():
        into[what] = into.get(what, 0) + value
    return into


def fleet_total(tenants: TenantSums) -> Sums:
    total: Sums = {}
    for versions in tenants.values():
        for sums in versions.values():
            add_sums(total, sums)
    return total


def adapter_of(version_label: str) -> str:
    return version_label.rpartition("@")[0]


# --- history for a page's first paint (sync; the publisher reads the same keys async) ---


def _periods(now: float, *, step: int, count: int, include_current: bool) -> list[int]:
    last = int(now) // step - (0 if include_current else 1)
    return list(range(last - count + 1, last + 1))


def version_history(
    *,
    tenant: str,
    version_label: str,
    now: float,
    minutes: int = HISTORY_MINUTES,
    seconds: int = HISTORY_SECONDS,
    client: redis.Redis | None = None,
) -> dict[str, Any]:
    """Completed minutes and recent seconds of one version, oldest first."""
    return versions_history(
        tenant=tenant,
        version_labels=[version_label],
        now=now,
        minutes=minutes,
        seconds=seconds,
        client=client,
    )


def versions_history(
    *,
    tenant: str,
    version_labels: list[str],
    now: float,
    minutes: int = HISTORY_MINUTES,
    seconds: int = HISTORY_SECONDS,
    client: redis.Redis | None = None,
) -> dict[str, Any]:
    """Completed minutes and recent seconds of some versions of one tenant, added up, oldest
    first; one pipelined round trip of HMGETs naming only these versions' fields, so the cost
    does not grow with the rest of the fleet."""
    minute_ids = _periods(now, step=60, count=minutes, include_current=False)
    second_ids = _periods(now, step=1, count=seconds, include_current=False)
    names = [
        (what, f"{tenant}|{adapter_of(label)}|{label}|{what}")
        for label in version_labels
        for what in CHART_FIELDS
    ]

    def point(t: int, values: list[Any]) -> dict[str, Any]:
        sums: Sums = {}
        for (what, _), value in zip(names, values, strict=True):
            if value is not None:
                sums[what] = sums.get(what, 0) + _number(value)
        return {"t": t, "sums": sums}

    if not names:
        return {
            "minutes": [{"t": m * 60, "sums": {}} for m in minute_ids],
            "seconds": [{"t": s, "sums": {}} for s in second_ids],
        }
    fields = [name for _, name in names]
    pipe = (client or shared_state.client()).pipeline(transaction=False)
    for m in minute_ids:
        pipe.hmget(f"{MINUTE_PREFIX}{m}", fields)
    for s in second_ids:
        pipe.hmget(f"{SECOND_PREFIX}{s}", fields)
    rows = pipe.execute()
    return {
        "minutes": [
            point(m * 60, r) for m, r in zip(minute_ids, rows[: len(minute_ids)], strict=True)
        ],
        "seconds": [point(s, r) for s, r in zip(second_ids, rows[len(minute_ids) :], strict=True)],
    }


def fleet_history(
    *,
    now: float,
    minutes: int = HISTORY_MINUTES,
    seconds: int = HISTORY_SECONDS,
    client: redis.Redis | None = None,
) -> dict[str, Any]:
    """The whole fleet's completed minutes and recent seconds (all tenants added up), with the
    evictions of each period; for operators' dashboard."""
    minute_ids = _periods(now, step=60, count=minutes, include_current=False)
    second_ids = _periods(now, step=1, count=seconds, include_current=False)
    pipe = (client or shared_state.client()).pipeline(transaction=False)
    for m in minute_ids:
        pipe.hgetall(f"{MINUTE_PREFIX}{m}")
    for s in second_ids:
        pipe.hgetall(f"{SECOND_PREFIX}{s}")
    rows = pipe.execute()
    evicted = evictions_by_period(since=minute_ids[0] * 60, until=now)

    def point(t: int, raw: dict[bytes, bytes], step: int) -> dict[str, Any]:
        sums = fleet_total(parse_period(raw))
        sums["evictions"] = sum(evicted.get(second, 0) for second in range(t, t + step))
        return {"t": t, "sums": sums}

    return {
        "minutes": [
            point(m * 60, r, 60) for m, r in zip(minute_ids, rows[: len(minute_ids)], strict=True)
        ],
        "seconds": [
            point(s, r, 1) for s, r in zip(second_ids, rows[len(minute_ids) :], strict=True)
        ],
    }


def evictions_by_period(*, since: float, until: float) -> dict[int, int]:
    """Evictions and unloads the controller carried out, per epoch second; one query."""
    from workers.metrics import EVICTING
    from workers.models import FleetAction

    times: Iterable[datetime] = FleetAction.objects.filter(
        kind__in=EVICTING,
        ok=True,
        created_at__gte=datetime.fromtimestamp(since, UTC),
        created_at__lt=datetime.fromtimestamp(until, UTC),
    ).values_list("created_at", flat=True)
    counts: dict[int, int] = defaultdict(int)
    for at in times:
        counts[int(at.timestamp())] += 1
    return dict(counts)


# --- the live messages: what the publisher sends each second and a joining socket first ---


def tenant_payload(*, tenant: str, seconds: list[int], periods: list[TenantSums]) -> dict[str, Any]:
    """One tenant's versions for each of `seconds` (its message on the tenant's group)."""
    return {
        "kind": "metrics",
        "step": 1,
        "points": [
            {"t": s, "versions": p.get(tenant, {})} for s, p in zip(seconds, periods, strict=True)
        ],
    }


def fleet_classes() -> dict[str, dict[str, int]]:
    """Each engine's queue by service class now: the slots each class's requests hold there,
    every gateway replica's (docs/classes.md); engines with none held map to {}."""
    from workers.models import Engine

    engines = sorted(Engine.objects.values_list("name", flat=True))
    return shared_state.engines_class_slots(engines)


def fleet_payload(
    *,
    seconds: list[int],
    periods: list[TenantSums],
    evicted: dict[int, int],
    classes: dict[str, dict[str, int]],
) -> dict[str, Any]:
    """The fleet's totals, with evictions, for each of `seconds`, and each engine's slots by
    service class now (fleet_classes; the engine page's live queue): the operators' message."""
    points = []
    for s, p in zip(seconds, periods, strict=True):
        sums = fleet_total(p)
        sums["evictions"] = evicted.get(s, 0)
        points.append({"t": s, "sums": sums})
    return {"kind": "fleet-metrics", "step": 1, "points": points, "classes": classes}


def catch_up_seconds(*, since: int, now: float) -> list[int]:
    """The seconds after `since` up to the current one (partial: the publisher sends it again
    complete), at most CATCH_UP_SECONDS of them."""
    current = int(now)
    return list(range(max(since + 1, current - CATCH_UP_SECONDS + 1), current + 1))


def read_seconds(seconds: list[int], *, client: redis.Redis | None = None) -> list[TenantSums]:
    """The per-second hashes of `seconds`, parsed; one pipelined round trip."""
    if not seconds:
        return []
    pipe = (client or shared_state.client()).pipeline(transaction=False)
    for s in seconds:
        pipe.hgetall(f"{SECOND_PREFIX}{s}")
    return [parse_period(raw) for raw in pipe.execute()]


def tenant_catch_up(*, tenant: str, since: int, now: float) -> dict[str, Any]:
    """What a tenant's metrics socket missed since second `since` (before it joined, or while
    it was reconnecting), in the publisher's message shape."""
    seconds = catch_up_seconds(since=since, now=now)
    return tenant_payload(tenant=tenant, seconds=seconds, periods=read_seconds(seconds))


def fleet_catch_up(*, since: int, now: float) -> dict[str, Any]:
    """The same for the operators' fleet socket (evictions from the database)."""
    seconds = catch_up_seconds(since=since, now=now)
    evicted = evictions_by_period(since=seconds[0], until=seconds[-1] + 1) if seconds else {}
    return fleet_payload(
        seconds=seconds, periods=read_seconds(seconds), evicted=evicted, classes=fleet_classes()
    )
