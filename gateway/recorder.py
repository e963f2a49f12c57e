"""Per-request measurements, aggregated in memory and flushed to Redis once a second.

Every replica adds into the same Redis hashes, so /metrics, the usage API and the live pages see
the whole fleet. Keys are per tenant and adapter (version for usage), never per request, so label
cardinality stays bounded with thousands of adapters:

- `lp:gwm:counters` fields `tenant|adapter|version|what` (requests, errors, gpu/cpu/cold hits,
  tokens in/out, sums of ttft/e2e/load ms) - monotonic, what /metrics exports;
- `lp:gwm:ttft` / `lp:gwm:e2e` / `lp:gwm:load` fields `tenant|adapter|le` - histogram buckets
  (ms); `lp:gwm:ttft:ex` / `lp:gwm:load:ex`, the same fields: the latest traced request in each
  bucket (`trace_id value unix_time`), the buckets' exemplars (a slow bucket opens its trace);
- `lp:gwm:sec:<epoch second>` and `lp:gwm:min:<epoch minute>` fields `tenant|adapter|version|what` -
  time series for the live charts (kept 10 minutes) and the history (kept 2 days);
- `lp:usage:<YYYY-MM-DD>` fields `tenant_id|version_id|class|requests|in|out|e2e_ms_sum` (no
  `class|` part for a request of no class) - chargeback by service class and the cost view's
  slot-seconds, persisted to gateway.DailyUsage by a task.

Besides the metrics, each request to a version goes into its pool's demand history
(workers.shared_state), marked ` follow` when it is a later turn of a conversation: the one
per-request key is a chat request's conversation key (`lp:conv:<hash>`, 30 min,
gateway/conversations.py), which is how its next turn is told from a first one.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from redis import asyncio as aioredis

from gateway.conversations import NO_TURN, Turn, follow_ups
from workers.shared_state import DEMAND_HISTORY_MAX, demand_entry, demand_key

TTFT_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
log = logging.getLogger(__name__)

SECOND_TTL_S = 600
# A flush Redis did not confirm is kept and sent again (Redis away, or its answer lost); each
# batch writes a marker in the same transaction, so a batch that went through before its answer
# was lost is not counted twice. At one batch a second, this keeps 10 minutes of an outage.
UNSENT_MAX = 600
BATCH_MARK_TTL_S = 3600
MINUTE_TTL_S = 2 * 86400
USAGE_TTL_S = 8 * 86400


@dataclass(frozen=True, slots=True)
class Measurement:
    tenant: str
    tenant_id: int
    adapter: str  # "" for the base model
    version: str  # "support@3", or the base model's name
    version_id: int | None
    pool: str
    served_name: str
    engine: str
    served_from: str  # "gpu", "cpu", "cold", or "base"
    ok: bool
    ttft_ms: float | None
    e2e_ms: float
    prompt_tokens: int
    completion_tokens: int
    load_ms: float = 0.0
    # It led the fleet's load of its version (the others waiting on that load did not). That
    # request is already in the pool's demand history, marked as a cold load, by the load
    # itself (workers.desired.request_load), which needs it there before its converge pass.
    caused_load: bool = False
    at: float = 0.0
    turn: Turn = NO_TURN  # a chat request's conversation keys (gateway/conversations.py)
    # A request that failed through its caller (a 4xx, a caller who stopped reading): not the
    # version's error, so the canary's automatic rollback never counts it (counted apart).
    caller_fault: bool = False
    trace_id: str = ""  # its trace when sampled (gateway.tracing): its buckets' exemplar
    service_class: str = ""  # the class it was admitted as ('' classes off): usage carries it


@dataclass(frozen=True, slots=True)
class _Demand:
    pool: str
    at: float
    served_name: str
    turn: Turn
    record: bool  # False: a load's leader, in the history already; only its turn is kept


def bucket(ms: float) -> str:
    for edge in TTFT_BUCKETS_MS:
        if ms <= edge:
            return str(edge)
    return "+Inf"


def _usage_rows(m: Measurement, day: str) -> list[tuple[str, str, float]]:
    """The chargeback counts, by tenant, version and the service class it ran in."""
    usage = f"{m.tenant_id}|{m.version_id or 0}"
    if m.service_class:
        usage += f"|{m.service_class}"
    return [
        (f"lp:usage:{day}", f"{usage}|requests", 1),
        (f"lp:usage:{day}", f"{usage}|in", m.prompt_tokens),
        (f"lp:usage:{day}", f"{usage}|out", m.completion_tokens),
        # the slot time it held (the cost view's GPU-slot-seconds)
        (f"lp:usage:{day}", f"{usage}|e2e_ms_sum", m.e2e_ms),
    ]


def _rows(m: Measurement) -> list[tuple[str, str, float]]:
    """(hash, field, amount) for every count one measurement adds to."""
    key = f"{m.tenant}|{m.adapter}|{m.version}"
    sec = int(m.at)
    minute = sec // 60
    day = datetime.fromtimestamp(m.at, UTC).strftime("%Y-%m-%d")
    rows: list[tuple[str, str, float]] = [
        ("lp:gwm:counters", f"{key}|requests", 1),
        ("lp:gwm:counters", f"{key}|{m.served_from}", 1),
        ("lp:gwm:counters", f"{key}|tokens_in", m.prompt_tokens),
        ("lp:gwm:counters", f"{key}|tokens_out", m.completion_tokens),
        ("lp:gwm:counters", f"{key}|e2e_ms_sum", round(m.e2e_ms)),
        ("lp:gwm:e2e", f"{m.tenant}|{m.adapter}|{bucket(m.e2e_ms)}", 1),
        (f"lp:gwm:sec:{sec}", f"{key}|requests", 1),
        (f"lp:gwm:sec:{sec}", f"{key}|{m.served_from}", 1),
        (f"lp:gwm:min:{minute}", f"{key}|requests", 1),
        (f"lp:gwm:min:{minute}", f"{key}|{m.served_from}", 1),
        (f"lp:gwm:min:{minute}", f"{key}|tokens_out", m.completion_tokens),
        *_usage_rows(m, day),
    ]
    if m.caller_fault:
        rows.append(("lp:gwm:counters", f"{key}|rejected", 1))
    elif not m.ok:
        rows += [
            ("lp:gwm:counters", f"{key}|errors", 1),
            (f"lp:gwm:min:{minute}", f"{key}|errors", 1),
            (f"lp:gwm:sec:{sec}", f"{key}|errors", 1),
        ]
    if m.ttft_ms is not None:
        rows += _ttft_rows(m, m.ttft_ms, key)
    if m.served_from == "cold":
        load = round(m.load_ms)
        rows += [
            ("lp:gwm:counters", f"{key}|load_ms_sum", load),
            ("lp:gwm:load", f"{m.tenant}|{m.adapter}|{bucket(m.load_ms)}", 1),
            (f"lp:gwm:min:{minute}", f"{key}|load_ms_sum", load),
            # the live charts' load latency (portal/live_series.py)
            (f"lp:gwm:sec:{sec}", f"{key}|load_ms_sum", load),
        ]
    return rows


def _ttft_rows(m: Measurement, ttft_ms: float, key: str) -> list[tuple[str, str, float]]:
    sec = int(m.at)
    minute = sec // 60
    ttft = round(ttft_ms, 1)
    return [
        ("lp:gwm:counters", f"{key}|ttft_count", 1),
        ("lp:gwm:counters", f"{key}|ttft_ms_sum", round(ttft_ms)),
        ("lp:gwm:ttft", f"{m.tenant}|{m.adapter}|{bucket(ttft_ms)}", 1),
        (f"lp:gwm:sec:{sec}", f"{key}|ttft_ms_sum", ttft),
        (f"lp:gwm:sec:{sec}", f"{key}|ttft_count", 1),
        (f"lp:gwm:min:{minute}", f"{key}|ttft_ms_sum", ttft),
        (f"lp:gwm:min:{minute}", f"{key}|ttft_count", 1),
    ]


def _exemplars(m: Measurement) -> dict[tuple[str, str], str]:
    """The buckets a traced request lands in, each with its trace as the exemplar."""
    found = {}
    if m.ttft_ms is not None:
        field_ = f"{m.tenant}|{m.adapter}|{bucket(m.ttft_ms)}"
        found[("lp:gwm:ttft:ex", field_)] = f"{m.trace_id} {m.ttft_ms:.1f} {m.at:.3f}"
    if m.served_from == "cold":
        field_ = f"{m.tenant}|{m.adapter}|{bucket(m.load_ms)}"
        found[("lp:gwm:load:ex", field_)] = f"{m.trace_id} {m.load_ms:.1f} {m.at:.3f}"
    return found


@dataclass
class _Batch:
    """One flush's worth of measurements, until Redis confirms it."""

    id: str
    counters: defaultdict[tuple[str, str], float]
    demand: list[_Demand] = field(default_factory=list)
    tried: bool = False
    exemplars: dict[tuple[str, str], str] = field(default_factory=dict)


class Recorder:
    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        # Sums of counts and of milliseconds (fractions, for the seconds charts): floats.
        self._counters: defaultdict[tuple[str, str], float] = defaultdict(float)
        self._demand: list[_Demand] = []
        self._unsent: list[_Batch] = []
        self._exemplars: dict[tuple[str, str], str] = {}  # (hash, field) -> the latest
        # Measurements not yet summed into the counters: the request only appends (the sums are
        # made by the flush, off the request's path).
        self._added: list[Measurement] = []

    def add(self, m: Measurement) -> None:
        self._added.append(m)
        if m.served_name and m.pool:  # a load's leader is in already, but its turn counts
            self._demand.append(_Demand(m.pool, m.at, m.served_name, m.turn, not m.caused_load))
        if m.trace_id:
            self._exemplars.update(_exemplars(m))

    async def flush(self) -> int:
        """Send what accumulated, and any earlier batch Redis did not confirm, oldest first;
        returns how many fields were written. Raises what Redis raised (the batch is kept)."""
        self._sum_added()
        if self._counters or self._demand:
            batch = _Batch(uuid.uuid4().hex, self._counters, self._demand)
            batch.exemplars, self._exemplars = self._exemplars, {}
            self._unsent.append(batch)
            self._counters, self._demand = defaultdict(float), []
            if len(self._unsent) > UNSENT_MAX:
                lost = self._unsent.pop(0)
                log.warning("gateway measurements dropped: batch %s (Redis away too long)", lost.id)
        written = 0
        while self._unsent:
            written += await self._send(self._unsent[0])
            self._unsent.pop(0)
        return written

    def _sum_added(self) -> None:
        added, self._added = self._added, []
        c = self._counters
        for m in added:
            for name, field_, amount in _rows(m):
                if amount:
                    c[(name, field_)] += amount

    async def _send(self, batch: _Batch) -> int:
        marker = f"lp:gwm:batch:{batch.id}"
        if batch.tried and await self.redis.exists(marker):
            return 0  # it went through; only its answer was lost
        batch.tried = True
        counters, demand = batch.counters, batch.demand
        later_turns = await follow_ups(self.redis, [d.turn for d in demand])
        # One transaction: the batch and its marker are applied whole or not at all.
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(marker, 1, ex=BATCH_MARK_TTL_S)
        ttls: dict[str, int] = {}
        for (name, field_), amount in counters.items():
            if field_.endswith("_ms_sum"):  # may hold a fraction: never HINCRBY on it
                pipe.hincrbyfloat(name, field_, float(amount))
            else:
                pipe.hincrby(name, field_, int(amount))
            if name.startswith("lp:gwm:sec:"):
                ttls[name] = SECOND_TTL_S
            elif name.startswith("lp:gwm:min:"):
                ttls[name] = MINUTE_TTL_S
            elif name.startswith("lp:usage:"):
                ttls[name] = USAGE_TTL_S
        for name, ttl in ttls.items():
            pipe.expire(name, ttl)
        for (name, field_), exemplar in batch.exemplars.items():
            pipe.hset(name, field_, exemplar)
        pools: dict[str, list[str]] = {}
        for d, follow_up in zip(demand, later_turns, strict=True):
            if d.record:
                entry = demand_entry(d.at, d.served_name, follow_up=follow_up)
                pools.setdefault(d.pool, []).append(entry)
        for pool, entries in pools.items():
            key = demand_key(pool)
            pipe.lpush(key, *entries)
            pipe.ltrim(key, 0, DEMAND_HISTORY_MAX - 1)
            pipe.incrby(key + ":n", len(entries))
        await pipe.execute()
        return len(counters)
