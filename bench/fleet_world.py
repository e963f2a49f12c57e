"""A simulated fleet for bench/fleet_scale.py: engines, versions, wishes, request history, an
engine model that carries a plan's actions out, and the scenarios' changes. Seeded and
deterministic; no Django, no I/O.

The controller's per-engine inputs are rebuilt the way workers.controller builds them, over plain
objects instead of database rows: `parse_history` is shared_state.demand_history's loop,
`build_snapshot` is controller.build_snapshot's loop (plugin engines: GPU residency observed).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from workers.cache_policy import (
    Action,
    DemandTracker,
    EngineSnapshot,
    Evict,
    Load,
    Pin,
    Resident,
    Unpin,
    VersionInfo,
)
from workers.cache_policy.rules import gpu_demotion_victim
from workers.controller_plan import WANT_ON_DEMAND, WANT_PINNED, WANT_WARM, EnginePlan
from workers.shared_state import parse_demand

DEFAULT_LOAD_COST_S = 0.5  # workers.engine_view.DEFAULT_LOAD_COST_S
SLO_MIX = (("gold", 0.1), ("silver", 0.3), ("bronze", 0.6))
PIN_QUOTA = {"gold": 2, "silver": 1, "bronze": 0}  # Tenant.quota_pinned_slots by class
RANKS = ((8, 0.4), (16, 0.3), (32, 0.2), (64, 0.1))
# (max_loras, max_cpu_loras): a mix of engine sizes
ENGINE_SIZES = ((4, 16), (8, 16), (8, 32), (16, 32), (16, 64))
BUSY_PEAKS = (0, 0, 1, 1, 2, 3)  # distinct adapters running at once lately
ENGINES_PER_POOL = 10
VERSIONS_PER_TENANT = 20
HISTORY_SPAN_S = 900.0


@dataclass(frozen=True, slots=True)
class VersionMeta:
    """What an AdapterVersion row carries that the snapshot reads."""

    name: str
    tenant: str
    slo: str
    rank: int
    size_bytes: int
    pool: str


@dataclass(slots=True)
class Row:
    """A Residency row: the times the controller and gateway write."""

    loaded_at: float | None = None
    last_used_at: float | None = None
    load_latency_ms: float | None = None


@dataclass
class SimEngine:
    name: str
    pool: str
    gpu_slots: int
    cpu_slots: int
    max_lora_rank: int
    busy_peak: int
    wanted: dict[str, str] = field(default_factory=dict)
    held: dict[str, Resident] = field(default_factory=dict)  # the engine's truth
    rows: dict[str, Row] = field(default_factory=dict)


@dataclass
class Fleet:
    now: float
    versions: dict[str, VersionMeta]
    tenant_quota: dict[str, int]
    pools: dict[str, list[str]]  # pool -> its versions, most popular first
    history: dict[str, list[bytes]]  # pool -> the Redis list (newest first), as LRANGE returns it
    engines: list[SimEngine]


def _pick(rng: random.Random, mix: tuple[tuple[object, float], ...]) -> object:
    return rng.choices([v for v, _ in mix], weights=[w for _, w in mix])[0]


def _zipf_cum(n: int, s: float = 1.0) -> list[float]:
    return list(itertools.accumulate(1.0 / (i + 1) ** s for i in range(n)))


def build_fleet(*, engines: int, versions: int, seed: int, requests: int = 5_000) -> Fleet:
    """Tenants (Zipf-sized, each bound to one pool), versions, engines and their wishes."""
    rng = random.Random(seed)
    n_pools = max(1, round(engines / ENGINES_PER_POOL))
    pools = [f"pool-{i}" for i in range(n_pools)]
    n_tenants = max(2, versions // VERSIONS_PER_TENANT)
    tenants = [f"t{i:03d}" for i in range(n_tenants)]
    slo = {t: str(_pick(rng, SLO_MIX)) for t in tenants}
    home = {t: pools[i % n_pools] for i, t in enumerate(tenants)}  # the big ones spread out
    owner = rng.choices(tenants, cum_weights=_zipf_cum(n_tenants, 0.8), k=versions)
    metas: dict[str, VersionMeta] = {}
    for i, tenant in enumerate(owner):
        rank = int(_pick(rng, RANKS))  # type: ignore[call-overload]
        size = int(rank * 4 * 2**20 * rng.uniform(0.5, 1.5))
        name = f"{tenant}--a{i:05d}--v1"
        metas[name] = VersionMeta(name, tenant, slo[tenant], rank, size, home[tenant])
    by_pool: dict[str, list[str]] = {p: [] for p in pools}
    for meta in metas.values():
        by_pool[meta.pool].append(meta.name)
    for names in by_pool.values():
        rng.shuffle(names)  # popularity order within the pool
    now = 1_800_000_000.0
    fleet = Fleet(
        now=now,
        versions=metas,
        tenant_quota={t: PIN_QUOTA[slo[t]] for t in tenants},
        pools=by_pool,
        history={p: _history(rng, names, requests, now) for p, names in by_pool.items()},
        engines=[],
    )
    for i in range(engines):
        gpu, cpu = ENGINE_SIZES[rng.randrange(len(ENGINE_SIZES))]
        fleet.engines.append(
            SimEngine(f"engine-{i:03d}", pools[i % n_pools], gpu, cpu, 64, rng.choice(BUSY_PEAKS))
        )
    for pool in pools:
        _wishes(rng, fleet, pool)
    return fleet


def _history(rng: random.Random, names: list[str], n: int, now: float) -> list[bytes]:
    """`n` recent requests drawn from the pool's Zipf popularity, as shared_state stores them."""
    if not names:
        return []
    picks = rng.choices(names, cum_weights=_zipf_cum(len(names)), k=n)
    times = sorted(now - rng.uniform(0.0, HISTORY_SPAN_S) for _ in range(n))
    return [f"{t:.3f} {name}".encode() for t, name in zip(reversed(times), picks, strict=True)]


def _wishes(rng: random.Random, fleet: Fleet, pool: str) -> None:
    """Keep-warm on every engine of the pool (desire_warm), a pin on one engine each
    (desire_pinned, within quotas and the pin rules), and on-demand wishes the gateway left
    behind (request_load), up to ~1.5x the engine's cache."""
    names = fleet.pools[pool]
    members = [e for e in fleet.engines if e.pool == pool]
    if not names or not members:
        return
    head = names[: max(4, len(names) // 20)]
    good = [n for n in head if fleet.versions[n].slo != "bronze"]
    n_warm = max(1, min(e.gpu_slots for e in members) // 4)
    warm = good[:n_warm]
    pinnable = [n for n in good[n_warm:] if fleet.tenant_quota[fleet.versions[n].tenant] > 0]
    for engine in members:
        for n in warm:
            engine.wanted[n] = WANT_WARM
    for n in pinnable[: len(members) // 2 + 1]:
        engine = rng.choice(members)
        tenant = fleet.versions[n].tenant
        pins = [v for v, w in engine.wanted.items() if w == WANT_PINNED]
        same = sum(1 for v in pins if fleet.versions[v].tenant == tenant)
        if len(pins) < 2 and same < fleet.tenant_quota[tenant]:
            engine.wanted[n] = WANT_PINNED
    cum = _zipf_cum(len(names))
    for engine in members:
        target = min(len(names), rng.randint(engine.cpu_slots // 2, engine.cpu_slots * 3 // 2))
        while len(engine.wanted) < target:
            engine.wanted.setdefault(rng.choices(names, cum_weights=cum)[0], WANT_ON_DEMAND)


def parse_history(raw: list[bytes]) -> list[tuple[float, str, bool]]:
    """shared_state.demand_history's parse: Redis entries, newest first -> (time, version,
    follow-up), oldest first."""
    return [(d.at, d.name, d.follow_up) for d in parse_demand(raw)]


def build_tracker(fleet: Fleet, pool: str) -> DemandTracker:
    return DemandTracker.from_history(parse_history(fleet.history[pool]))


def _version_info(meta: VersionMeta, row: Row | None) -> VersionInfo:
    latency = row.load_latency_ms if row is not None and row.load_latency_ms else None
    return VersionInfo(
        name=meta.name,
        tenant=meta.tenant,
        slo=meta.slo,  # type: ignore[arg-type]
        rank=meta.rank,
        size_bytes=meta.size_bytes,
        load_cost_s=(latency / 1000.0) if latency else DEFAULT_LOAD_COST_S,
    )


def build_snapshot(
    fleet: Fleet, engine: SimEngine, *, now: float, in_flight: dict[str, int] | None = None
) -> EngineSnapshot:
    """workers.engine_view.build_snapshot's loop over plain rows (a plugin engine)."""
    inflight = in_flight or {}
    gpu = {n for n, r in engine.held.items() if r.tier == "gpu"}
    pinned = {n for n, r in engine.held.items() if r.pinned}
    resident: dict[str, Resident] = {}
    infos: dict[str, VersionInfo] = {}
    for name in engine.held:
        row = engine.rows.get(name)
        loaded = row.loaded_at if row is not None and row.loaded_at else now
        used = row.last_used_at if row is not None and row.last_used_at else loaded
        resident[name] = Resident(
            name,
            "gpu" if name in gpu else "cpu",
            pinned=name in pinned,
            in_flight=inflight.get(name, 0),
            loaded_at=loaded,
            last_used=used,
        )
        infos[name] = _version_info(fleet.versions[name], row)
    for name in engine.wanted:
        infos.setdefault(name, _version_info(fleet.versions[name], engine.rows.get(name)))
    tenants = {fleet.versions[n].tenant for n in set(engine.rows) | set(engine.wanted)}
    return EngineSnapshot(
        engine=engine.name,
        now=now,
        gpu_slots=engine.gpu_slots,
        cpu_slots=engine.cpu_slots,
        max_lora_rank=engine.max_lora_rank,
        resident=resident,
        versions=infos,
        tenant_pin_quota={t: fleet.tenant_quota[t] for t in tenants},
        busy_peak=engine.busy_peak,
    )


def carry_out(fleet: Fleet, engine: SimEngine, plan: EnginePlan, *, now: float) -> None:
    """The engine takes the actions as vLLM would (add_lora and warm-ups take a GPU slot, its
    LRU demotes the least recently used); the controller records loads and drops the on-demand
    wishes the policy evicted (controller._drop_policy_evictions)."""
    for i, action in enumerate(plan.actions):
        _take(fleet, engine, action, now + i * 1e-3)  # one after another: LRU order is real
    for name in plan.evicted_by_policy:
        if engine.wanted.get(name) == WANT_ON_DEMAND:
            del engine.wanted[name]


def _take(fleet: Fleet, engine: SimEngine, action: Action, now: float) -> None:
    held, name = engine.held, action.version
    if isinstance(action, Evict):
        del held[name]
        return
    if isinstance(action, Unpin):
        held[name] = replace(held[name], pinned=False)
        return
    if isinstance(action, Load):
        held[name] = Resident(name, "cpu", loaded_at=now, last_used=now)
        size = fleet.versions[name].size_bytes
        engine.rows[name] = Row(loaded_at=now, load_latency_ms=50.0 + size / 2e6)
    if held[name].tier != "gpu":
        victim = gpu_demotion_victim(held, engine.gpu_slots, name)
        if victim:
            held[victim] = replace(held[victim], tier="cpu")
        if victim is not None:
            held[name] = replace(held[name], tier="gpu")
    pinned = held[name].pinned or isinstance(action, Pin)
    held[name] = replace(held[name], last_used=now, pinned=pinned)  # a use touches vLLM's LRU
    engine.rows.setdefault(name, Row()).last_used_at = now


# The scenarios' changes (bench/fleet_scale.py): each changes a copy of the steady fleet and
# returns the `incoming` version per engine, if any.


def _restart(fleet: Fleet, seed: int) -> dict[str, str]:
    count = max(1, round(len(fleet.engines) / 10))
    for engine in random.Random(seed).sample(fleet.engines, count):
        engine.held.clear()  # forgot every adapter loaded at run time; rows keep their times
    return {}


def _miss_storm(fleet: Fleet, seed: int) -> dict[str, str]:
    """Each engine gets a request for the most popular version of its pool it does not hold."""
    incoming = {}
    for engine in fleet.engines:
        names = fleet.pools[engine.pool]
        miss = next((n for n in names if n not in engine.held), None)
        if miss is not None:
            incoming[engine.name] = miss
            entry = f"{fleet.now:.3f} {miss}".encode()
            fleet.history[engine.pool].insert(0, entry)  # request_load records the demand
    return incoming


def _release(fleet: Fleet, seed: int) -> dict[str, str]:
    """1% new versions, each wished on-demand on the least-filled engine of its pool."""
    olds = list(fleet.versions.values())
    for i in range(max(1, len(olds) // 100)):
        base = olds[(i * 97 + seed) % len(olds)]
        meta = VersionMeta(
            f"{base.tenant}--r{i:05d}--v1",
            base.tenant,
            base.slo,
            base.rank,
            base.size_bytes,
            base.pool,
        )
        fleet.versions[meta.name] = meta
        fleet.pools[meta.pool].append(meta.name)
        members = [e for e in fleet.engines if e.pool == meta.pool]
        target = min(members, key=lambda e: (len(e.wanted) / e.cpu_slots, e.name))
        target.wanted[meta.name] = WANT_ON_DEMAND
    return {}


def _disable(fleet: Fleet, seed: int) -> dict[str, str]:
    names = sorted(fleet.versions)
    gone = set(names[seed % 100 :: 100])
    for engine in fleet.engines:
        for name in gone & set(engine.wanted):
            del engine.wanted[name]  # not holdable: _load_world leaves it out of `wanted`
    return {}


CHANGES: dict[str, Callable[[Fleet, int], dict[str, str]]] = {
    "steady": lambda fleet, seed: {},
    "restart": _restart,
    "miss-storm": _miss_storm,
    "release": _release,
    "disable": _disable,
}
