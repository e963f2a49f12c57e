"""How the controller sees one engine: what it holds (the plugin's report, or /v1/models on a
stock vLLM), GPU residency observed or inferred, the portal's rows for it, and the cache policy's
snapshot and demand built from them."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from adapters.models import AdapterVersion
from workers import shared_state
from workers.cache_policy import (
    DemandTracker,
    EngineSnapshot,
    PolicyParams,
    Resident,
    VersionInfo,
)
from workers.cache_policy.fairness import FairnessGovernor, protected_params
from workers.cache_policy.hours import GroupHours
from workers.models import Engine, Residency, ResidencyState
from workers.schedule_rules import tenant_hours
from workers.selectors import engine_client, holdable, residencies_of_engine
from workers.vllm_client import EngineError, VLLMClient

T = TypeVar("T")
DEFAULT_LOAD_COST_S = 0.5
FOREIGN_TENANT = ""  # names on an engine that are no portal version: evicted, never pinned


@dataclass
class Observed:
    """What one engine holds now, as it says (plugin) or as far as a stock vLLM shows."""

    registered: set[str]
    resident: set[str]
    pinned: set[str]
    gpu: set[str] | None  # None: vLLM cannot tell; the tier is inferred (see infer_gpu)
    running: set[str] = field(default_factory=set)  # vLLM metrics: requests running or waiting
    loads: dict[str, int] = field(default_factory=dict)
    plugin: bool = True


def run_engine_call(engine: Engine, call: Callable[[VLLMClient], Awaitable[T]]) -> T:
    """One call to the engine from sync code (Celery tasks, services)."""

    async def go() -> T:
        async with engine_client(engine) as client:
            return await call(client)

    return asyncio.run(go())


async def observe(engine: Engine, client: VLLMClient) -> Observed:
    running: set[str] = set()
    try:
        info = await client.lora_requests_info()
        if info is not None:
            running = set(info.running) | set(info.waiting)
    except EngineError:
        pass  # metrics are a hint; residency below is the truth
    if engine.has_plugin:
        report = await client.residency()
        gpu = report.get("gpu") if report.get("gpu_observed") else None
        return Observed(
            registered={r["name"] for r in report.get("registered", [])},
            resident=set(report.get("resident", [])),
            pinned=set(report.get("pinned", [])),
            gpu=set(gpu) if gpu is not None else None,
            running=running,
            loads=dict(report.get("loads", {})),
        )
    cards = await client.list_models()
    names = {c["id"] for c in cards if c.get("parent")}
    # A stock vLLM shows names only: assume registered names are in its cache.
    return Observed(names, set(names), set(), None, running, plugin=False)


def infer_gpu(observed: Observed, rows: dict[str, Residency], gpu_slots: int) -> set[str]:
    """GPU residency when vLLM cannot tell: pins, then the most recently used or loaded.

    vLLM activates an adapter in a GPU slot when it loads it and whenever a batch uses it, and
    its GPU slots are an LRU: the `max_loras` most recent of (load, use) are the likely holders.
    Exact after a load or a request the portal saw; a request sent around the portal can reorder it.
    """
    if observed.gpu is not None:
        return observed.gpu

    def recency(name: str) -> float:
        row = rows.get(name)
        if row is None:
            return 0.0
        stamps = [t.timestamp() for t in (row.loaded_at, row.last_used_at) if t is not None]
        return max(stamps, default=0.0)

    pinned = sorted(observed.pinned & observed.resident)
    others = sorted(observed.resident - observed.pinned, key=recency, reverse=True)
    return set((pinned + others)[: max(gpu_slots, len(pinned))])


def version_info(version: AdapterVersion, row: Residency | None) -> VersionInfo:
    latency = row.load_latency_ms if row is not None and row.load_latency_ms else None
    return VersionInfo(
        name=version.served_name,
        tenant=version.tenant.slug,
        slo=version.adapter.effective_slo_class or "bronze",  # type: ignore[arg-type]
        rank=version.rank or 0,
        size_bytes=version.size_bytes,
        load_cost_s=(latency / 1000.0) if latency else DEFAULT_LOAD_COST_S,
    )


@dataclass
class World:
    """The engine's rows and versions, loaded once per pass."""

    rows: dict[str, Residency]
    versions: dict[str, AdapterVersion]
    wanted: dict[str, str]


def load_world(engine: Engine, extra: set[str]) -> World:
    rows = {r.version.served_name: r for r in residencies_of_engine(engine)}
    versions = {name: row.version for name, row in rows.items()}
    missing = extra - set(versions)
    if missing:
        for v in AdapterVersion.objects.filter(served_name__in=missing).select_related(
            "adapter__tenant", "tenant"
        ):
            versions[v.served_name] = v
    wanted = {
        name: row.desired_state
        for name, row in rows.items()
        if row.desired_state != ResidencyState.ABSENT and holdable(row.version)
    }
    return World(rows, versions, wanted)


def build_snapshot(
    engine: Engine, observed: Observed, world: World, *, now: float
) -> EngineSnapshot:
    inflight = shared_state.inflight_counts(engine.name)
    gpu = infer_gpu(observed, world.rows, engine.max_loras)
    resident: dict[str, Resident] = {}
    infos: dict[str, VersionInfo] = {}
    for name in observed.resident:
        row = world.rows.get(name)
        in_flight = inflight.get(name, 0) or (1 if name in observed.running else 0)
        loaded = row.loaded_at.timestamp() if row is not None and row.loaded_at else now
        used = row.last_used_at.timestamp() if row is not None and row.last_used_at else loaded
        resident[name] = Resident(
            name,
            "gpu" if name in gpu else "cpu",
            pinned=name in observed.pinned,
            in_flight=in_flight,
            loaded_at=loaded,
            last_used=used,
        )
        version = world.versions.get(name)
        infos[name] = (
            version_info(version, row)
            if version is not None
            else VersionInfo(name, FOREIGN_TENANT, "bronze", 0, 0, DEFAULT_LOAD_COST_S)
        )
    for name in world.wanted:
        infos.setdefault(name, version_info(world.versions[name], world.rows.get(name)))
    tenants = {v.tenant for v in world.versions.values()}
    return EngineSnapshot(
        engine=engine.name,
        now=now,
        gpu_slots=engine.max_loras,
        cpu_slots=engine.max_cpu_loras,
        max_lora_rank=engine.max_lora_rank,
        resident=resident,
        versions=infos,
        tenant_pin_quota={t.slug: t.quota_pinned_slots for t in tenants},
        # Adapters served at once: those running, and those the gateway holds back at the pin
        # guard (gateway.limits): pins are for quiet engines, and a held request says this
        # one is not (the plan then gives policy pins up, and the held requests go in).
        busy_peak=len(
            (observed.running & observed.resident) | shared_state.held_versions(engine.name)
        ),
        # `arriving` stays empty: the gateway has a version loaded (load_on_engine) before it
        # sends requests for it, so none wait on an engine for a slot the planner cannot see.
    )


# One tracker per pool per worker process, fed only the requests recorded since the last pass:
# replaying a pool's whole history for every engine would dominate a fleet pass.
@dataclass
class PoolDemand:
    seen: int
    tracker: DemandTracker
    # Gold protection (workers.cache_policy.fairness), fed each request's version, class and
    # whether it started a cold load; `outcomes` holds the requests it has not been given yet.
    # Made at the first pass, which knows the pool's cache size, and given the whole history.
    governor: FairnessGovernor | None = None
    outcomes: list[tuple[str, bool]] = field(default_factory=list)


_pools: dict[str, PoolDemand] = {}
_pools_lock = threading.Lock()


def _refreshed(pool: str, hours: GroupHours) -> PoolDemand:
    """The pool's state with every request recorded so far (call under _pools_lock), told the
    tenants' business hours as read for this pass (`tenant_hours`, outside the lock: an
    operator may have changed a window)."""
    state = _pools.get(pool)
    total, new = shared_state.demand_since(pool, state.seen if state else 0)
    if state is None or new is None:
        history = shared_state.demand_history(pool)
        tracker = DemandTracker.from_history(
            ((d.at, d.name, d.follow_up) for d in history), hours=hours
        )
        state = PoolDemand(total, tracker)
        state.outcomes = [(d.name, d.missed) for d in history]
    else:
        state.tracker.set_hours(hours)
        for d in new:
            state.tracker.observe(d.name, d.at, follow_up=d.follow_up)
            state.outcomes.append((d.name, d.missed))
    # A tenant may have opened or closed since its last request.
    state.tracker.advance(time.time())
    state.seen = total
    _pools[pool] = state
    return state


def pool_demand(pool: str) -> DemandTracker:
    hours = tenant_hours()
    with _pools_lock:
        return _refreshed(pool, hours).tracker


def pool_policy(pool: str, pool_slots: int) -> tuple[DemandTracker, PolicyParams]:
    """The pool's demand and the policy's parameters for one converge pass, with gold
    protection stepped once from what the gateway measured, as the simulator's `portal` does
    every tick (bench/cachesim/policies/portal.py). `pool_slots`: the cache slots of the pool's
    engines together, the size of the LRU the governor compares with."""
    hours = tenant_hours()
    with _pools_lock:
        state = _refreshed(pool, hours)
        outcomes, state.outcomes = state.outcomes, []
        names = {name for name, _ in outcomes}
    slo_of = slo_classes(names)
    with _pools_lock:
        if state.governor is None:
            state.governor = FairnessGovernor(pool_slots)
        state.governor.resize(pool_slots)  # an engine came or went
        for name, missed in outcomes:
            state.governor.observe(name, slo_of.get(name, "bronze"), missed)
        boost = state.governor.tick()
    return state.tracker, protected_params(PolicyParams(), boost)


def slo_classes(served_names: set[str]) -> dict[str, str]:
    """Each version's SLO class (its adapter's, else its tenant's), one query."""
    versions = AdapterVersion.objects.filter(served_name__in=served_names).select_related(
        "adapter__tenant"
    )
    return {v.served_name: v.adapter.effective_slo_class or "bronze" for v in versions}
