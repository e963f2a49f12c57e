"""Celery tasks of the fleet: thin wrappers around workers.services.engines, .controller and .desired.

Node tasks (stage, converge) run on the engine's own queue (`Engine.queue`), where the worker has
the node's disk; the reconcile and alarm sweeps run on the shared queue and fan out.
"""

from __future__ import annotations

import logging

from celery import shared_task

from workers import shared_state
from workers.controller import EngineBusy, converge_engine, engine_probe_now, probe_fleet
from workers.models import Engine
from workers.reconcile import reconcile_fleet_pass, stage_version_on_engine
from workers.schedules import apply_warmup_window  # noqa: F401 - registers the beat task here

log = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def probe_engines() -> dict[str, str]:
    """Beat entry: mark engines up or down from their health route; watch those found down."""
    return probe_fleet()


@shared_task(acks_late=True, ignore_result=True)
def probe_engine_task(engine_id: int) -> str | None:
    """One engine probed now (a gateway could not reach it): its state, for every replica."""
    engine = Engine.objects.filter(pk=engine_id).first()
    if engine is None:
        return None
    return engine_probe_now(engine)


@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=(EngineBusy,),
    retry_backoff=1,
    retry_backoff_max=10,
    max_retries=20,
)
def converge_engine_task(engine_id: int, incoming: str | None = None) -> dict | None:
    """One converge pass on this node's engine; publishes the outcome of an `incoming` load."""
    engine = Engine.objects.filter(pk=engine_id).first()
    if engine is None:
        return None
    try:
        report = converge_engine(engine, incoming=incoming, wait_s=30.0 if incoming else 2.0)
    except EngineBusy:
        raise
    except Exception as exc:
        if incoming:
            shared_state.load_failed(engine.name, incoming, "converge-failed", str(exc))
        raise
    if incoming:
        if incoming in report.resident:
            shared_state.load_finish(engine.name, incoming, "ok")
        else:
            code, reason = report.load_failure(incoming)
            shared_state.load_failed(engine.name, incoming, code, reason)
    return {"engine": report.engine, "state": report.state, "actions": report.actions}


@shared_task(acks_late=True, ignore_result=True)
def stage_version_task(engine_id: int, version_id: int) -> None:
    """Put a version's files on this node's disk (pre-staging after approval)."""
    stage_version_on_engine(engine_id=engine_id, version_id=version_id)


@shared_task(acks_late=True, ignore_result=True)
def reconcile_fleet() -> dict[str, str]:
    """Beat entry: a converge pass for every engine that is not down, on its node queue."""
    return reconcile_fleet_pass()


@shared_task(acks_late=True, ignore_result=True)
def check_alarms() -> list:
    """Beat entry: raise or clear thrash alarms."""
    from workers.thrash import alarms_check_thrash

    return [str(x) for x in alarms_check_thrash()]
