"""The cache controller: drives one engine towards what the portal wants, one worker at a time.

`converge_engine` observes the engine (the plugin's residency, or /v1/models on a stock vLLM),
builds the policy's snapshot (requests in flight from the gateway's Redis counts and vLLM's own
metrics, demand from the pool's recent requests), plans with workers.controller_plan (the cache
policy's code, every step checked by the hard rules), stages files on the node, carries the
actions out through the plugin, records each with its latency, and writes back what the engine
really holds. It runs on the engine's node queue, under a Redis lock with a lease.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from redis.exceptions import LockError

from adapters.models import AdapterVersion
from portal.audit import record_event
from portal.errors import ApplicationError
from workers import shared_state
from workers.alarms import alarm_clear, alarm_raise
from workers.cache_policy import (
    Action,
    DemandTracker,
    EngineSnapshot,
    Evict,
    Load,
    Pin,
    PolicyParams,
    Resident,
    Unpin,
    VersionInfo,
    Warm,
)
from workers.controller_plan import EnginePlan, plan_converge
from workers.models import (
    AlarmKind,
    Engine,
    EngineState,
    FleetAction,
    Residency,
    ResidencyState,
)
from workers.selectors import engine_client, holdable, pool_of, residencies_of_engine
from workers.staging import NodeCopyInvalid, quarantine_node_copy, stage_on_node
from workers.vllm_client import EngineError, VLLMClient

log = logging.getLogger(__name__)
T = TypeVar("T")
DEFAULT_LOAD_COST_S = 0.5
FOREIGN_TENANT = ""  # names on an engine that are no portal version: evicted, never pinned


class EngineBusy(Exception):
    """Another controller holds the engine's lock longer than we may wait."""


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


@dataclass
class ConvergeReport:
    engine: str
    actions: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    state: str = ""
    resident: list[str] = field(default_factory=list)


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


def _version_info(version: AdapterVersion, row: Residency | None) -> VersionInfo:
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
class _World:
    """The engine's rows and versions, loaded once per pass."""

    rows: dict[str, Residency]
    versions: dict[str, AdapterVersion]
    wanted: dict[str, str]


def _load_world(engine: Engine, extra: set[str]) -> _World:
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
    return _World(rows, versions, wanted)


def build_snapshot(
    engine: Engine, observed: Observed, world: _World, *, now: float
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
            _version_info(version, row)
            if version is not None
            else VersionInfo(name, FOREIGN_TENANT, "bronze", 0, 0, DEFAULT_LOAD_COST_S)
        )
    for name in world.wanted:
        infos.setdefault(name, _version_info(world.versions[name], world.rows.get(name)))
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
        busy_peak=len(observed.running & observed.resident),
    )


# One tracker per pool per worker process, fed only the requests recorded since the last pass:
# replaying a pool's whole history for every engine would dominate a fleet pass.
_trackers: dict[str, tuple[int, DemandTracker]] = {}
_trackers_lock = threading.Lock()


def pool_demand(pool: str) -> DemandTracker:
    with _trackers_lock:
        seen, tracker = _trackers.get(pool, (0, None))  # type: ignore[assignment]
        total, new = shared_state.demand_since(pool, seen)
        if tracker is None or new is None:
            tracker = DemandTracker.from_history(shared_state.demand_history(pool))
        else:
            for at, name in new:
                tracker.observe(name, at)
        _trackers[pool] = (total, tracker)
        return tracker


def _demand(engine: Engine) -> DemandTracker:
    return pool_demand(engine.pool)


def converge_engine(
    engine: Engine, *, incoming: str | None = None, wait_s: float = 5.0
) -> ConvergeReport:
    """One converge pass under the engine's lock; raises EngineBusy if it cannot get it."""
    lock = shared_state.engine_lock(
        engine.name, lease_s=settings.FLEET_LOCK_LEASE_SECONDS, wait_s=wait_s
    )
    if not lock.acquire():
        raise EngineBusy(f"engine {engine.name} is being converged by another worker")
    try:
        return _converge_locked(Engine.objects.get(pk=engine.pk), incoming)
    finally:
        try:
            lock.release()
        except LockError:
            log.warning("lock of %s expired during a converge pass", engine.name)


def _converge_locked(engine: Engine, incoming: str | None) -> ConvergeReport:
    report = ConvergeReport(engine=engine.name, state=engine.state)
    if engine.state == EngineState.DOWN:
        return report
    observed = run_engine_call(engine, lambda c: observe(engine, c))
    shared_state.busy_sample(engine.name, len(observed.running))
    world = _load_world(engine, observed.resident | observed.registered | {incoming or ""})
    if incoming is not None and incoming not in world.wanted:
        version = world.versions.get(incoming)
        if version is None or not holdable(version):
            raise ApplicationError("fleet.not_servable", f"{incoming} cannot be loaded.")
        world.wanted[incoming] = ResidencyState.REGISTERED
    now = time.time()
    snapshot = build_snapshot(engine, observed, world, now=now)
    plan = plan_converge(
        snapshot,
        _demand(engine),
        wanted=world.wanted,
        incoming=incoming,
        draining=engine.state == EngineState.DRAINING,
        auto_pins=settings.FLEET_AUTO_PINS and engine.has_plugin,
        params=PolicyParams(),
    )
    _drop_policy_evictions(engine, plan, world)
    for action in plan.actions:
        report.actions.append(_execute(engine, action, world))
    report.skipped = [
        {
            "action": type(s.action).__name__.lower(),
            "version": s.action.version,
            "code": s.code,
            "message": s.message,
        }
        for s in plan.skipped
    ]
    # Names the engine forgot (restart) go back into the queue of loads; stock unloads leave
    # weights behind, which the plugin's orphan list shows.
    after = run_engine_call(engine, lambda c: observe(engine, c))
    _record_observed(engine, after, world)
    from workers.reconcile import cleanup_engine_node

    cleanup_engine_node(engine, after.registered)
    engine = _settle_engine_state(engine, after, world)
    report.state = engine.state
    report.resident = sorted(after.resident)
    return report


def _drop_policy_evictions(engine: Engine, plan: EnginePlan, world: _World) -> None:
    """The policy evicted an on-demand version: it is no longer wanted here."""
    for name in plan.evicted_by_policy:
        row = world.rows.get(name)
        if row is not None and row.desired_state == ResidencyState.REGISTERED:
            row.desired_state = ResidencyState.ABSENT
            row.desired_reason = "evicted by the cache policy"
            row.save(update_fields=["desired_state", "desired_reason", "updated_at"])
            world.wanted.pop(name, None)


def _row(engine: Engine, world: _World, name: str) -> Residency | None:
    row = world.rows.get(name)
    if row is None and name in world.versions:
        row, _ = Residency.objects.get_or_create(
            engine=engine,
            version=world.versions[name],
            defaults={"desired_state": world.wanted.get(name, ResidencyState.ABSENT)},
        )
        world.rows[name] = row
    return row


def _execute(engine: Engine, action: Action, world: _World) -> dict[str, Any]:
    name = action.version
    version = world.versions.get(name)
    kind = type(action).__name__.lower()
    started = time.monotonic()
    error = ""
    try:
        if isinstance(action, Load):
            _load(engine, version, world)
        elif isinstance(action, Evict):
            if engine.has_plugin:
                run_engine_call(engine, lambda c: c.evict(name))
            else:
                run_engine_call(engine, lambda c: c.unload_adapter(name))
        elif isinstance(action, Pin):
            run_engine_call(engine, lambda c: c.pin(name))
        elif isinstance(action, Unpin):
            run_engine_call(engine, lambda c: c.unpin(name))
        elif isinstance(action, Warm):
            run_engine_call(engine, lambda c: c.completion(name, "warm", max_tokens=1))
    except (EngineError, ApplicationError, NodeCopyInvalid, OSError) as exc:
        error = str(exc)
        log.warning("%s %s on %s failed: %s", kind, name, engine.name, error)
    ms = (time.monotonic() - started) * 1000
    FleetAction.objects.create(
        engine=engine,
        version=version,
        served_name=name,
        kind=kind,
        reason=action.reason[:300],
        ok=not error,
        error=error[:2000],
        latency_ms=ms,
    )
    row = _row(engine, world, name) if version is not None else None
    if row is not None:
        row.last_error = error[:2000]
        fields = ["last_error", "updated_at"]
        if isinstance(action, Load) and not error:
            row.loaded_at, row.load_latency_ms = timezone.now(), ms
            fields += ["loaded_at", "load_latency_ms"]
        row.save(update_fields=fields)
    return {"action": kind, "version": name, "ok": not error, "ms": round(ms, 1), "error": error}


def _load(engine: Engine, version: AdapterVersion | None, world: _World) -> None:
    if version is None:
        raise ApplicationError("fleet.unknown_version", "not a portal version")
    row = _row(engine, world, version.served_name)
    try:
        staged = stage_on_node(adapter_root=engine.adapter_root, version=version)
    except NodeCopyInvalid as bad:
        _quarantine(engine, version, row, bad)
        raise
    if row is not None and row.staged_at is None:
        row.staged_at = timezone.now()
        row.save(update_fields=["staged_at", "updated_at"])
    if staged.downloaded:
        FleetAction.objects.create(
            engine=engine,
            version=version,
            served_name=version.served_name,
            kind="stage",
            reason="files for a load",
            latency_ms=staged.ms,
        )
    if not engine.has_plugin:
        run_engine_call(engine, lambda c: c.load_adapter(version.served_name, str(staged.path)))
        return
    try:
        run_engine_call(engine, lambda c: c.load_verified(version.served_name, version.manifest))
    except EngineError as exc:
        from workers.vllm_client import file_error_code

        code = file_error_code(exc)
        if code is not None:
            _quarantine(engine, version, row, NodeCopyInvalid(code, exc.engine_reason))
        raise


def _quarantine(
    engine: Engine, version: AdapterVersion, row: Residency | None, bad: NodeCopyInvalid
) -> None:
    """The node's copy failed verification: move it aside, say so, and let a fresh copy come."""
    moved = quarantine_node_copy(engine.adapter_root, version.served_name)
    FleetAction.objects.create(
        engine=engine,
        version=version,
        served_name=version.served_name,
        kind="quarantine",
        reason=f"{bad.code}: {bad.message}"[:300],
        ok=True,
    )
    if row is not None:
        row.quarantined_at = timezone.now()
        row.quarantine_reason = f"{bad.code}: {bad.message}"
        row.staged_at = None
        row.save(update_fields=["quarantined_at", "quarantine_reason", "staged_at", "updated_at"])
    alarm_raise(
        engine=engine,
        kind=AlarmKind.QUARANTINE,
        subject=version.served_name,
        message=(
            f"The copy of {version.served_name} on {engine.name}'s node failed verification "
            f"({bad.code}: {bad.message}); moved to {moved} and re-staged from the store."
        ),
        details={"code": bad.code, "moved_to": str(moved) if moved else ""},
    )


def _observed_state(name: str, observed: Observed, gpu: set[str]) -> str:
    if name in observed.pinned:
        return ResidencyState.PINNED
    if name in observed.resident:
        return ResidencyState.RESIDENT_GPU if name in gpu else ResidencyState.RESIDENT_CPU
    if name in observed.registered:
        return ResidencyState.REGISTERED
    return ResidencyState.ABSENT


def _record_observed(engine: Engine, observed: Observed, world: _World) -> None:
    gpu = infer_gpu(observed, world.rows, engine.max_loras)
    now = timezone.now()
    for name in observed.registered | observed.resident:
        if name in world.versions:
            _row(engine, world, name)
    for name, row in world.rows.items():
        state = _observed_state(name, observed, gpu)
        fields = ["observed_state", "observed_at", "updated_at"]
        row.observed_state, row.observed_at = state, now
        if state != ResidencyState.ABSENT and row.quarantined_at is not None:
            row.quarantined_at, row.quarantine_reason = None, ""
            fields += ["quarantined_at", "quarantine_reason"]
            alarm_clear(engine=engine, kind=AlarmKind.QUARANTINE, subject=name)
        row.save(update_fields=fields)


def _settle_engine_state(engine: Engine, observed: Observed, world: _World) -> Engine:
    """warming -> up once its wanted set is loaded (or cannot be, for reasons now on record)."""
    if engine.state != EngineState.WARMING:
        return engine
    waiting = [
        n
        for n in world.wanted
        if n not in observed.resident and not world.rows.get(n, Residency()).last_error
    ]
    if waiting:
        return engine
    with transaction.atomic():
        locked = Engine.objects.select_for_update().get(pk=engine.pk)
        if locked.state != EngineState.WARMING:
            return locked
        locked.state = EngineState.UP
        locked.save(update_fields=["state"])
        record_event(
            action="engine.state",
            actor="controller",
            obj=locked,
            object_id=locked.name,
            before={"state": EngineState.WARMING},
            after={"state": EngineState.UP, "reason": "wanted adapters loaded"},
        )
    return locked


def note_use(engine: Engine, served_name: str) -> None:
    """The gateway saw a request for it: recency for GPU inference and demand for the policy."""
    shared_state.demand_record(engine.pool, served_name)


__all__ = ["ConvergeReport", "EngineBusy", "Observed", "converge_engine", "pool_of"]
