"""Writes of what the portal wants on engines (Residency.desired_state), and the loads it asks for.

Every change here is a database write plus a converge pass enqueued on the engine's node queue
after commit; the controller (workers.controller) does the rest, and the periodic reconcile
repeats it, so a lost task only delays. Changes a person asked for are audited.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from adapters.models import AdapterVersion, VersionStatus, WarmupPolicy
from core.audit import record_event
from core.errors import ApplicationError
from core.tasks import task_named
from workers import shared_state
from workers.cache_policy import EngineChoice, choose_engine
from workers.cache_policy.routing import Tier
from workers.models import Engine, Residency, ResidencyState
from workers.schedule_rules import in_window
from workers.selectors import LOADABLE_ENGINE_STATES, engines_for_version, holdable

WANTED = (ResidencyState.REGISTERED, ResidencyState.RESIDENT_GPU, ResidencyState.PINNED)


def enqueue_converge(
    engine: Engine, *, incoming: str | None = None, countdown: float | None = None
) -> None:
    """A converge pass on the engine's node, once the current transaction commits."""
    converge_engine_task = task_named("workers.tasks.converge_engine_task")
    kwargs: dict[str, Any] = {"engine_id": engine.pk}
    if incoming:
        kwargs["incoming"] = incoming
    transaction.on_commit(
        lambda: converge_engine_task.apply_async(
            kwargs=kwargs, queue=engine.queue, countdown=countdown
        )
    )


def enqueue_probe(engine: Engine) -> None:
    """A probe of this engine now, on the shared queue, once the current transaction commits."""
    probe_engine_task = task_named("workers.tasks.probe_engine_task")
    transaction.on_commit(lambda: probe_engine_task.apply_async(kwargs={"engine_id": engine.pk}))


def enqueue_stage(engine: Engine, version: AdapterVersion) -> None:
    stage_version_task = task_named("workers.tasks.stage_version_task")
    transaction.on_commit(
        lambda: stage_version_task.apply_async(
            kwargs={"engine_id": engine.pk, "version_id": version.pk}, queue=engine.queue
        )
    )


def _person(actor: Any) -> bool:
    return bool(getattr(actor, "is_authenticated", False))


def set_desired(
    *,
    version: AdapterVersion,
    engine: Engine,
    state: str,
    reason: str,
    actor: Any = "controller",
    request_id: str = "",
    converge: bool = True,
    audit_action: str = "engine.residency.desire",
) -> Residency:
    """Upsert the wish for one version on one engine; audited when a person asked for it."""
    with transaction.atomic():
        row, _ = Residency.objects.select_for_update().get_or_create(
            engine=engine, version=version, defaults={"desired_state": ResidencyState.ABSENT}
        )
        before = row.desired_state
        if before != state or row.desired_reason != reason:
            row.desired_state, row.desired_reason = state, reason[:200]
            row.save(update_fields=["desired_state", "desired_reason", "updated_at"])
        if _person(actor):
            record_event(
                action=audit_action,
                actor=actor,
                tenant=version.tenant,
                obj=engine,
                object_id=f"{engine.name}/{version.served_name}",
                before={"desired_state": before},
                after={"desired_state": state, "reason": reason},
                request_id=request_id,
            )
        if converge and before != state:
            enqueue_converge(engine)
    return row


def desire_warm(*, version: AdapterVersion, reason: str, actor: Any) -> list[Residency]:
    """Keep the version warm on every engine of its pool that may hold it."""
    return [
        set_desired(
            version=version,
            engine=e,
            state=ResidencyState.RESIDENT_GPU,
            reason=reason,
            actor=actor,
        )
        for e in engines_for_version(version)
    ]


def desire_pinned(*, version: AdapterVersion, reason: str, actor: Any) -> list[Residency]:
    """Pin the version on one engine of its pool: where it already is, else the best placed."""
    existing = Residency.objects.filter(
        version=version, desired_state=ResidencyState.PINNED
    ).select_related("engine")
    if existing:
        return list(existing)
    engine = best_engine_for(version)
    if engine is None:
        raise ApplicationError(
            "fleet.no_engine", f"No engine of {version.served_name}'s pool can hold it now."
        )
    return [
        set_desired(
            version=version, engine=engine, state=ResidencyState.PINNED, reason=reason, actor=actor
        )
    ]


def release_warm(*, version: AdapterVersion, reason: str, actor: Any) -> list[Residency]:
    """Back to on demand: still loaded, and the cache policy may now evict it."""
    rows = Residency.objects.filter(
        version=version,
        desired_state__in=(ResidencyState.RESIDENT_GPU, ResidencyState.PINNED),
    ).select_related("engine")
    return [
        set_desired(
            version=version,
            engine=row.engine,
            state=ResidencyState.REGISTERED,
            reason=reason,
            actor=actor,
        )
        for row in rows
    ]


def _choices(version: AdapterVersion, engines: Iterable[Engine]) -> list[EngineChoice]:
    engines = list(engines)
    rows = {r.engine_id: r for r in Residency.objects.filter(version=version, engine__in=engines)}
    held: dict[int, int] = {}
    for r in Residency.objects.filter(engine__in=engines).exclude(
        observed_state=ResidencyState.ABSENT
    ):
        held[r.engine_id] = held.get(r.engine_id, 0) + 1
    out = []
    for engine in engines:
        row = rows.get(engine.pk)
        observed = row.observed_state if row is not None else ResidencyState.ABSENT
        where = (
            Tier.GPU
            if observed in (ResidencyState.RESIDENT_GPU, ResidencyState.PINNED)
            else Tier.CPU
            if observed in (ResidencyState.RESIDENT_CPU, ResidencyState.REGISTERED)
            else Tier.NONE
        )
        out.append(
            EngineChoice(
                engine=engine.name,
                where=where,
                free_cpu_slots=max(0, engine.max_cpu_loras - held.get(engine.pk, 0)),
                in_flight=sum(shared_state.inflight_counts(engine.name).values()),
                capacity=engine.max_num_seqs,
            )
        )
    return out


def best_engine_for(version: AdapterVersion) -> Engine | None:
    """The policy's engine choice (the gateway's code) among engines that may load it now."""
    engines = engines_for_version(version)
    if not engines:
        return None
    name = choose_engine(_choices(version, engines))
    return next(e for e in engines if e.name == name)


def on_version_status(*, version: AdapterVersion, before: str, after: str, actor: Any) -> None:
    """The registry changed a version's status: stage, place, or remove it."""
    if after == VersionStatus.STAGED:
        # Approved: put the files on the pool's nodes (warm tier) before anyone asks.
        for engine in engines_for_version(version):
            enqueue_stage(engine, version)
    elif after == VersionStatus.ACTIVE:
        place_released(version=version, actor=actor)
    elif after in (VersionStatus.DISABLED, VersionStatus.RETIRED, VersionStatus.REJECTED):
        remove_everywhere(version=version, reason=after)


def place_released(*, version: AdapterVersion, actor: Any) -> list[Residency]:
    """A released version goes where its adapter's warm-up policy says; on demand: one engine."""
    adapter = version.adapter
    policy = adapter.warmup_policy
    if policy == WarmupPolicy.ALWAYS_WARM or (
        policy == WarmupPolicy.PRELOAD_BUSINESS_HOURS and in_window(adapter, None)
    ):
        return desire_warm(version=version, reason="released; kept warm", actor="controller")
    if policy == WarmupPolicy.PINNED:
        return desire_pinned(version=version, reason="released; pinned", actor="controller")
    engine = best_engine_for(version)
    if engine is None:
        return []
    return [
        set_desired(
            version=version,
            engine=engine,
            state=ResidencyState.REGISTERED,
            reason="released",
            actor="controller",
        )
    ]


def remove_everywhere(*, version: AdapterVersion, reason: str) -> list[Residency]:
    rows = list(Residency.objects.filter(version=version).select_related("engine"))
    for row in rows:
        set_desired(
            version=version,
            engine=row.engine,
            state=ResidencyState.ABSENT,
            reason=reason,
            converge=False,
        )
        enqueue_converge(row.engine)
    return rows


# Refusals that last only while requests are in flight: every slot the load could take holds a
# version serving requests (the hard rules' codes, workers.cache_policy.rules.check_plan).
NO_ROOM_CODES = frozenset({"implicit-eviction", "no-gpu-slot"})


@dataclass(frozen=True)
class LoadResult:
    ok: bool
    leader: bool  # this caller asked for the load; the others waited for it
    waited_ms: float
    error: str = ""
    code: str = ""  # why not, when not ok (ConvergeReport.load_failure)

    @property
    def no_room(self) -> bool:
        """Refused for want of a free slot: worth asking again once requests finish."""
        return not self.ok and self.code in NO_ROOM_CODES


def request_load(
    *,
    version: AdapterVersion,
    engine: Engine,
    wait_s: float | None = None,
    record_demand: bool = True,
) -> LoadResult:
    """Have `engine` load `version` and wait for it; concurrent callers share one load.

    The first caller claims the load in Redis and enqueues one converge pass on the engine's
    node with the version as `incoming`; every caller (that one included) waits for the outcome
    the pass publishes. A claim left by a dead worker expires after the wait. A caller asking
    again for the same request (after a refusal) passes `record_demand=False`: the request is
    in the demand history once.
    """
    if not holdable(version):
        raise ApplicationError("fleet.not_servable", f"{version} is {version.status}.", status=409)
    if engine.state not in LOADABLE_ENGINE_STATES:
        raise ApplicationError(
            "fleet.engine_not_loading",
            f"Engine '{engine.name}' is {engine.state}: it takes no new adapters.",
            status=409,
        )
    wait = settings.FLEET_LOAD_WAIT_SECONDS if wait_s is None else wait_s
    started = time.monotonic()
    leader = shared_state.load_claim(engine.name, version.served_name, ttl_s=wait)
    if leader and record_demand:
        # The pool's demand history gets this request now, marked as the one that started a
        # cold load (gold protection counts those per class), so the converge pass below
        # already sees it; the gateway's recorder leaves it out (Measurement.caused_load).
        shared_state.demand_record(engine.pool, version.served_name, missed=True)
    if leader:
        with transaction.atomic():
            set_desired(
                version=version,
                engine=engine,
                state=_on_demand_or_more(version, engine),
                reason="a request needed it",
                converge=False,
            )
            enqueue_converge(engine, incoming=version.served_name)
    while True:
        outcome = shared_state.load_outcome(engine.name, version.served_name)
        waited = (time.monotonic() - started) * 1000
        if outcome == "ok":
            return LoadResult(True, leader, waited)
        if outcome is not None and outcome.startswith("error:"):
            code, reason = shared_state.load_error(outcome)
            return LoadResult(False, leader, waited, reason, code)
        if outcome is None and not leader:
            # The leader's claim expired or finished long ago: take the lead ourselves.
            return request_load(
                version=version,
                engine=engine,
                wait_s=max(0.0, wait - waited / 1000),
                record_demand=record_demand,
            )
        if waited / 1000 > wait:
            return LoadResult(False, leader, waited, "timed out waiting for the load", "timeout")
        time.sleep(0.05)


def _on_demand_or_more(version: AdapterVersion, engine: Engine) -> str:
    row = Residency.objects.filter(version=version, engine=engine).first()
    if row is not None and row.desired_state in WANTED:
        return row.desired_state
    return ResidencyState.REGISTERED
