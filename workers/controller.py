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
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from redis.exceptions import LockError, RedisError

from adapters.models import AdapterVersion
from adapters.tracing import traced_step
from core import telemetry
from core.audit import record_event
from core.errors import ApplicationError
from workers import engine_slots, shared_state
from workers.alarms import alarm_clear
from workers.cache_policy import Action, Evict, Load, Pin, Unpin, Warm
from workers.controller_plan import POLICY_REASON, EnginePlan, plan_converge
from workers.engine_view import (
    Observed,
    World,
    build_snapshot,
    infer_gpu,
    load_world,
    observe,
    pool_demand,
    pool_policy,
    run_engine_call,
)
from workers.models import AlarmKind, Engine, EngineState, FleetAction, Residency, ResidencyState
from workers.node_copies import quarantine_version_copy, stage_version_files
from workers.selectors import engine_key, holdable, pool_cache_slots
from workers.staging import NodeCopyInvalid
from workers.vllm_client import EngineError, file_error_code

log = logging.getLogger(__name__)


class EngineBusy(Exception):
    """Another controller holds the engine's lock longer than we may wait."""


@dataclass
class ConvergeReport:
    engine: str
    actions: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    state: str = ""
    resident: list[str] = field(default_factory=list)

    def load_failure(self, name: str) -> tuple[str, str]:
        """(code, reason) why `name` is not resident after the pass: its load failed on the
        engine ("load-failed"), the plan skipped it (the hard rule's code: "implicit-eviction"
        or "no-gpu-slot" when no slot could be freed), or neither ("not-loaded")."""
        for a in self.actions:
            if a["version"] == name and not a["ok"]:
                return "load-failed", a["error"]
        for s in self.skipped:
            if s["version"] == name:
                return s["code"], s["message"]
        return "not-loaded", "not loaded"


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


def watch_until_back(engine: Engine) -> None:
    """Probe an engine that is away again soon, until it answers: recovery then starts within
    FLEET_DOWN_PROBE_SECONDS of its return instead of at the next reconcile tick (a whole
    period later at worst, which alone would spend the restart goal's budget)."""
    from workers.desired import enqueue_converge

    every = settings.FLEET_DOWN_PROBE_SECONDS
    if every > 0 and shared_state.watch_claim(engine.name, every_s=every):
        enqueue_converge(engine, countdown=every)


def engine_probe_now(engine: Engine) -> str:
    """Probe one engine now and record the verdict ('up' or the reason): a gateway that could
    not reach it asks for this, so that the fleet's state (which every gateway replica follows)
    says it is away, and says so again, with a new `last_seen_at`, as soon as it answers. An
    engine found away is watched until it answers (watch_until_back)."""
    from workers.services.engines import engine_record_probe, probe_boundary, probe_capabilities

    async def probe() -> tuple[str, dict[str, Any] | None]:
        error = await probe_boundary(engine)
        if error:
            return error, None
        return "", await probe_capabilities(engine.url, engine_key(engine))

    error, capabilities = asyncio.run(probe())
    recorded = engine_record_probe(engine=engine, error=error, capabilities=capabilities)
    if error and recorded.state == EngineState.DOWN:
        watch_until_back(recorded)
    return error or "up"


def probe_fleet() -> dict[str, str]:
    """The prober's beat: every engine probed and its verdict recorded; an engine found away is
    watched until it answers (watch_until_back), as one the gateway or a pass found away is,
    so its return is seen within FLEET_DOWN_PROBE_SECONDS rather than at the next tick."""
    from workers.services.engines import engines_probe_all

    verdicts = engines_probe_all()
    for engine in Engine.objects.filter(name__in=list(verdicts), state=EngineState.DOWN):
        watch_until_back(engine)
    return verdicts


def _converge_locked(engine: Engine, incoming: str | None) -> ConvergeReport:
    report = ConvergeReport(engine=engine.name, state=engine.state)
    if engine.state == EngineState.DOWN:
        # Back already? Then bring it back now rather than at the prober's next pass, so a
        # restarted engine is restored within one reconcile period plus its load time.
        from workers.services.engines import engine_record_probe, probe_boundary

        error = asyncio.run(probe_boundary(engine))
        if error:
            watch_until_back(engine)
            return report
        engine = engine_record_probe(engine=engine, error="")
        report.state = engine.state
    try:
        observed = run_engine_call(engine, lambda c: observe(engine, c))
    except EngineError as exc:  # not answering (starting, restarting): the next pass retries
        log.warning("converge of %s skipped: %s", engine.name, exc)
        watch_until_back(engine)
        report.skipped.append(
            {"action": "observe", "version": "", "code": "engine.unreachable", "message": str(exc)}
        )
        return report
    shared_state.busy_sample(engine.name, len(observed.running))
    # The gateway admits by the engine's pinned set: it must hold what the engine really has
    # pinned (an engine restart forgets pins; a Redis restart loses the set).
    engine_slots.pins_observed(engine.name, observed.pinned)
    world = load_world(engine, observed.resident | observed.registered | {incoming or ""})
    if incoming is not None and incoming not in world.wanted:
        version = world.versions.get(incoming)
        if version is None or not holdable(version):
            raise ApplicationError("fleet.not_servable", f"{incoming} cannot be loaded.")
        world.wanted[incoming] = ResidencyState.REGISTERED
    now = time.time()
    snapshot = build_snapshot(engine, observed, world, now=now)
    demand, params = pool_policy(engine.pool, pool_cache_slots(engine.pool))
    plan = plan_converge(
        snapshot,
        demand,
        wanted=world.wanted,
        incoming=incoming,
        draining=engine.state == EngineState.DRAINING,
        auto_pins=settings.FLEET_AUTO_PINS and engine.has_plugin,
        params=params,
        pinned_at=_pinned_at(engine, observed),
        pin_min_hold_s=settings.FLEET_PIN_MIN_HOLD_SECONDS,
    )
    _drop_policy_evictions(engine, plan, world)
    report.skipped = [
        {
            "action": type(s.action).__name__.lower(),
            "version": s.action.version,
            "code": s.code,
            "message": s.message,
        }
        for s in plan.skipped
    ]
    for action in plan.actions:
        refused = _slot_refusal(engine, action)
        if refused is not None:
            log.info("%s on %s skipped: %s", action, engine.name, refused["message"])
            report.skipped.append(refused)
            continue
        report.actions.append(_execute(engine, action, world))
    # Names the engine forgot (restart) go back into the queue of loads; stock unloads leave
    # weights behind, which the plugin's orphan list shows.
    after = run_engine_call(engine, lambda c: observe(engine, c))
    engine_slots.pins_observed(engine.name, after.pinned)
    from workers.reconcile import cleanup_engine_node

    cleanup_engine_node(engine, after.registered)
    # What the engine holds and whether it takes traffic change together: the residency API
    # never shows a version resident on a warming engine that this pass has just settled, and
    # every gateway replica reads both from one announcement.
    with transaction.atomic():
        # A probe that found the engine away during this pass has the last word: its rows stay
        # absent until a pass after its return observes them.
        if Engine.objects.select_for_update().get(pk=engine.pk).state != EngineState.DOWN:
            _record_observed(engine, after, world)
        engine = _settle_engine_state(engine, after, world)
    report.state = engine.state
    report.resident = sorted(after.resident)
    return report


def _drop_policy_evictions(engine: Engine, plan: EnginePlan, world: World) -> None:
    """The policy evicted an on-demand version: it is no longer wanted here."""
    for name in plan.evicted_by_policy:
        row = world.rows.get(name)
        if row is not None and row.desired_state == ResidencyState.REGISTERED:
            row.desired_state = ResidencyState.ABSENT
            row.desired_reason = "evicted by the cache policy"
            row.save(update_fields=["desired_state", "desired_reason", "updated_at"])
            world.wanted.pop(name, None)


def _pinned_at(engine: Engine, observed: Observed) -> dict[str, float]:
    """When each pin the cache policy placed on the engine was placed (the pinned set's times;
    the anti-thrash hold counts from them). Explicit pins (an operator's, a schedule's) are left
    out: while wished they are protected anyway, and when the wish goes they go at once.
    Without Redis every pin counts as just placed (none is moved)."""
    now = time.time()
    try:
        since = engine_slots.pinned_since(engine.name)
    except RedisError:
        since = dict.fromkeys(observed.pinned, now)
    recent = {n: t for n, t in since.items() if now - t < settings.FLEET_PIN_MIN_HOLD_SECONDS}
    if not recent:
        return {}
    last_reason: dict[str, str] = {}
    rows = FleetAction.objects.filter(
        engine=engine,
        kind="pin",
        ok=True,
        served_name__in=list(recent),
        created_at__gte=timezone.now()
        - timedelta(seconds=settings.FLEET_PIN_MIN_HOLD_SECONDS + 60),
    ).order_by("created_at")
    for name, reason in rows.values_list("served_name", "reason"):
        last_reason[name] = reason
    return {n: t for n, t in recent.items() if last_reason.get(n, "").startswith(POLICY_REASON)}


def _slot_refusal(engine: Engine, action: Action) -> dict[str, str] | None:
    """A pin goes into the engine's pinned set before the engine is asked (the gateway then
    admits by it): refused while the versions in flight there leave no room for one more pin,
    or while Redis does not answer (the gateway could not see the pin). None: go ahead."""
    if not isinstance(action, Pin):
        return None
    claim = engine_slots.pin_claim(engine.name, action.version, max_loras=engine.max_loras)
    if claim == "ok":
        return None
    code, message = (
        ("fleet.pin_no_room", "the versions in flight leave no unpinned GPU slot for this pin")
        if claim == "no_room"
        else ("fleet.pin_unavailable", "Redis does not answer: the gateway could not see the pin")
    )
    return {"action": "pin", "version": action.version, "code": code, "message": message}


def _row(engine: Engine, world: World, name: str) -> Residency | None:
    row = world.rows.get(name)
    if row is None and name in world.versions:
        row, _ = Residency.objects.get_or_create(
            engine=engine,
            version=world.versions[name],
            defaults={"desired_state": world.wanted.get(name, ResidencyState.ABSENT)},
        )
        world.rows[name] = row
    return row


def _execute(engine: Engine, action: Action, world: World) -> dict[str, Any]:
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
            engine_slots.pin_drop(engine.name, name)  # an eviction ends a pin
        elif isinstance(action, Pin):
            _pin(engine, name)
        elif isinstance(action, Unpin):
            # The engine first, then the set: the gateway is never less strict than the engine.
            run_engine_call(engine, lambda c: c.unpin(name))
            engine_slots.pin_drop(engine.name, name)
        elif isinstance(action, Warm):
            _warm(engine, name)
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


def _pin(engine: Engine, name: str) -> None:
    """The name is in the pinned set already (_slot_refusal); out again if the engine refuses.
    After a transient failure the pin may or may not be made: the entry stays (stricter) until
    this pass's closing observation sets the set to what the engine reports."""
    try:
        run_engine_call(engine, lambda c: c.pin(name))
    except EngineError as exc:
        if exc.permanent:
            engine_slots.pin_drop(engine.name, name)
        raise


def _warm(engine: Engine, name: str) -> None:
    """A one-token request the controller sends itself: counted in the engine's in-flight hash
    as the gateway counts its own, so it never makes one distinct unpinned adapter too many."""
    try:
        entered = engine_slots.slot_enter(engine.name, name, max_loras=engine.max_loras)
    except RedisError as exc:
        raise ApplicationError("fleet.warm_unavailable", f"Redis does not answer: {exc}") from exc
    if not entered:
        raise ApplicationError(
            "fleet.warm_no_room", "the versions in flight leave no unpinned GPU slot for it"
        )
    try:
        run_engine_call(engine, lambda c: c.completion(name, "warm", max_tokens=1))
    finally:
        engine_slots.slot_leave(engine.name, name)


@traced_step("load")
def _load(engine: Engine, version: AdapterVersion | None, world: World) -> None:
    if version is None:
        raise ApplicationError("fleet.unknown_version", "not a portal version")
    row = _row(engine, world, version.served_name)
    in_cpu = row is not None and row.observed_state == ResidencyState.RESIDENT_CPU
    staged = stage_version_files(engine, version, row, reason="files for a load", retry=False)
    # Where the load started from: the engine's CPU cache, the node's disk, or nowhere (its
    # files fetched first: a cold load).
    tier = "cpu" if in_cpu else ("cold" if staged.downloaded else "disk")
    telemetry.annotate(
        {"lora_portal.cache_tier": tier, "lora_portal.stage_ms": round(staged.ms, 3)}
    )
    if not engine.has_plugin:
        run_engine_call(engine, lambda c: c.load_adapter(version.served_name, str(staged.path)))
        return
    try:
        run_engine_call(engine, lambda c: c.load_verified(version.served_name, version.manifest))
    except EngineError as exc:
        code = file_error_code(exc)
        if code is not None:
            quarantine_version_copy(engine, version, row, NodeCopyInvalid(code, exc.engine_reason))
        raise


def _observed_state(name: str, observed: Observed, gpu: set[str]) -> str:
    if name in observed.pinned:
        return ResidencyState.PINNED
    if name in observed.resident:
        return ResidencyState.RESIDENT_GPU if name in gpu else ResidencyState.RESIDENT_CPU
    if name in observed.registered:
        return ResidencyState.REGISTERED
    return ResidencyState.ABSENT


def _record_observed(engine: Engine, observed: Observed, world: World) -> None:
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


def _settle_engine_state(engine: Engine, observed: Observed, world: World) -> Engine:
    """warming -> up at the end of a pass that reached the engine: it has loaded what it could,
    and waiting longer changes nothing until the next pass (a wish the plan skipped for room,
    or whose load failed, would keep a one-engine pool out of service for a whole reconcile
    period, or for good). What is missing is loaded on demand, as on any engine that is up.
    The state is read again under lock: a probe's verdict during the pass (down) stands."""
    with transaction.atomic():
        locked = Engine.objects.select_for_update().get(pk=engine.pk)
        if locked.state != EngineState.WARMING:
            return locked
        missing = sorted(n for n in world.wanted if n not in observed.resident)
        locked.state = EngineState.UP
        locked.save(update_fields=["state"])
        record_event(
            action="engine.state",
            actor="controller",
            obj=locked,
            object_id=locked.name,
            before={"state": EngineState.WARMING},
            after={
                "state": EngineState.UP,
                "reason": "converge pass done",
                "wanted_resident": len(world.wanted) - len(missing),
                "wanted_missing": missing[:20],
            },
        )
    return locked


__all__ = ["ConvergeReport", "EngineBusy", "converge_engine", "pool_demand"]
