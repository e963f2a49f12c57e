"""Reads of the gateway's numbers: per-adapter time series (Redis) and daily usage (database).

The series come from the per-second and per-minute hashes gateway.recorder writes
(`lp:gwm:sec:<s>` kept 10 minutes, `lp:gwm:min:<m>` kept 2 days), read with one pipelined round
trip of HMGETs naming only this adapter's fields, so the cost does not grow with the fleet.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import date
from typing import Any

import redis

from adapters.models import AdapterVersion
from core.errors import ApplicationError
from gateway.models import DailyUsage
from gateway.recorder import MINUTE_TTL_S, SECOND_TTL_S
from workers import shared_state

MAX_SECONDS = SECOND_TTL_S
MAX_MINUTES = MINUTE_TTL_S // 60
# What each period's hash may hold per version (gateway.recorder.Recorder.add).
SERIES_FIELDS = ("requests", "errors", "gpu", "cpu", "cold", "ttft_ms_sum", "ttft_count")


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One second or minute of one adapter, all its versions together."""

    t: int  # epoch seconds at the start of the period
    requests: int
    errors: int
    cold: int | None  # None: the period's hash does not record where requests were served
    hit_ratio: float | None  # gpu+cpu hits / requests; None without requests or without tiers
    ttft_ms: float | None  # mean time to first token; None without a successful request

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _period(*, seconds: int | None, minutes: int | None) -> tuple[str, int, int]:
    """(key prefix, period length in s, number of periods) for exactly one of the two windows."""
    if (seconds is None) == (minutes is None):
        raise ApplicationError("metrics.bad_window", "Give either seconds or minutes.")
    if seconds is not None:
        if not 1 <= seconds <= MAX_SECONDS:
            raise ApplicationError(
                "metrics.bad_window", f"seconds must be 1..{MAX_SECONDS} (what Redis keeps)."
            )
        return "lp:gwm:sec:", 1, seconds
    assert minutes is not None
    if not 1 <= minutes <= MAX_MINUTES:
        raise ApplicationError(
            "metrics.bad_window", f"minutes must be 1..{MAX_MINUTES} (what Redis keeps)."
        )
    return "lp:gwm:min:", 60, minutes


def _point(t: int, values: dict[str, float]) -> SeriesPoint:
    requests = int(values.get("requests", 0))
    hits = values.get("gpu", 0) + values.get("cpu", 0)
    tiers = hits + values.get("cold", 0)
    # Each request adds to exactly one tier, so no tier counts at all with requests means the
    # hash does not record tiers (the per-second hashes, as the recorder writes them today).
    known = requests == 0 or tiers > 0
    ttft_count = values.get("ttft_count", 0)
    return SeriesPoint(
        t=t,
        requests=requests,
        errors=int(values.get("errors", 0)),
        cold=int(values.get("cold", 0)) if known else None,
        hit_ratio=hits / requests if requests and known else None,
        ttft_ms=round(values.get("ttft_ms_sum", 0) / ttft_count, 3) if ttft_count else None,
    )


def adapter_versions(*, tenant: str, adapter: str) -> list[int]:
    return list(
        AdapterVersion.objects.filter(tenant__slug=tenant, adapter__name=adapter).values_list(
            "number", flat=True
        )
    )


def adapter_series(
    *,
    tenant: str,
    adapter: str,
    seconds: int | None = None,
    minutes: int | None = None,
    numbers: Sequence[int] | None = None,
    now: float | None = None,
    client: redis.Redis | None = None,
) -> list[SeriesPoint]:
    """Oldest first, one point per period up to the current (still filling) one.

    `tenant` is the slug and `adapter` the name, as the recorder keys them; `numbers` are the
    adapter's version numbers (read from the database when not given).
    """
    prefix, step, count = _period(seconds=seconds, minutes=minutes)
    if numbers is None:
        numbers = adapter_versions(tenant=tenant, adapter=adapter)
    last = int(now if now is not None else time.time()) // step
    periods = range(last - count + 1, last + 1)
    fields = [
        (what, f"{tenant}|{adapter}|{adapter}@{n}|{what}")
        for n in numbers
        for what in SERIES_FIELDS
    ]
    if not fields:
        return [_point(p * step, {}) for p in periods]
    pipe = (client or shared_state.client()).pipeline(transaction=False)
    for p in periods:
        pipe.hmget(f"{prefix}{p}", [name for _, name in fields])
    points = []
    for p, raw in zip(periods, pipe.execute(), strict=True):
        values: dict[str, float] = {}
        for (what, _), value in zip(fields, raw, strict=True):
            if value is not None:
                values[what] = values.get(what, 0) + float(value)
        points.append(_point(p * step, values))
    return points


# --- usage (chargeback) ---


@dataclass(frozen=True, slots=True)
class UsageRow:
    day: date
    tenant: str
    adapter: str | None  # None: requests to the base model itself
    version: str | None  # "support@3"
    service_class: str  # the class its requests were admitted as ('' none: classes off)
    requests: int
    prompt_tokens: int
    completion_tokens: int
    # Of the above, what release plans' shadow pairs asked (labelled `shadow`).
    shadow_requests: int = 0
    shadow_prompt_tokens: int = 0
    shadow_completion_tokens: int = 0


USAGE_COLUMNS = tuple(UsageRow.__dataclass_fields__)


def usage_rows(*, day_from: date, day_to: date, tenant_id: int | None = None) -> list[UsageRow]:
    """Rows per day, version and service class, ordered by day, tenant, adapter, version, class;
    one query."""
    qs = DailyUsage.objects.filter(day__gte=day_from, day__lte=day_to)
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    rows = qs.order_by(
        "day", "tenant__slug", "version__adapter__name", "version__number", "service_class"
    ).values_list(
        "day",
        "tenant__slug",
        "version__adapter__name",
        "version__number",
        "service_class",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "shadow_requests",
        "shadow_prompt_tokens",
        "shadow_completion_tokens",
    )
    return [
        UsageRow(
            day=day,
            tenant=tenant,
            adapter=adapter,
            version=f"{adapter}@{number}" if adapter else None,
            service_class=klass,
            requests=requests,
            prompt_tokens=prompt,
            completion_tokens=completion,
            shadow_requests=shadow[0],
            shadow_prompt_tokens=shadow[1],
            shadow_completion_tokens=shadow[2],
        )
        for day, tenant, adapter, number, klass, requests, prompt, completion, *shadow in rows
    ]
