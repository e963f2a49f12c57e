"""Starting and running an eval run: created naming what it compares, queued as one Celery task
(evals.tasks.eval_run_execute), claimed queued -> running by that task, the candidate's files
promoted to the serving store for the run, every case not yet recorded asked on both sides
(evals.services.asking), then closed with its verdict.

A redelivered task (its worker died) takes its own claim up again and skips each case already
recorded (EvalCaseResult is unique per run, case and side); any other task leaves a claimed run
alone, so a duplicate start never runs a case twice.

The task running a run marks it alive (`heartbeat_at`) every EVAL_RUN_HEARTBEAT_SECONDS. A
worker killed outright is not redelivered its task until the broker's visibility timeout (hours),
so beat queues again each running run whose mark is older than EVAL_RUN_CLAIM_STALE_SECONDS
(`runs_requeue_stale`), and a new task claims it and skips what is recorded. A task that finds
its claim taken (it was only slow) stops asking and leaves the run to its new owner.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from adapters.models import AdapterVersion, VersionStatus
from adapters.services.promotion import promote_to_serving
from adapters.tracing import version_span
from core import telemetry
from core.audit import record_event
from core.errors import Conflict
from core.tasks import task_named
from evals.models import EvalRun, RunStatus
from evals.scoring.verdicts import SIDES
from evals.selectors import policy_of
from evals.services.runs import run_create, run_finish
from workers.models import Engine

RUNNABLE_STATUSES = (VersionStatus.VALIDATED, VersionStatus.STAGED)

log = logging.getLogger(__name__)


class ClaimLost(Exception):
    """The run was queued again and claimed by another task while this one ran it."""


def baseline_of(version: AdapterVersion) -> str:
    """What serves the adapter now: its active version as `name@N`, else `base`."""
    active = (
        AdapterVersion.objects.filter(adapter_id=version.adapter_id, status=VersionStatus.ACTIVE)
        .order_by("-number")
        .first()
    )
    return f"{version.adapter.name}@{active.number}" if active else "base"


def run_start(*, version: AdapterVersion, started_by: Any = None) -> tuple[EvalRun, bool]:
    """A new run on the suite version the adapter's policy holds, queued after commit; (the run, created). A run
    of the same suite version already queued or running is returned instead of a second one."""
    if version.status not in RUNNABLE_STATUSES:
        raise Conflict(
            "eval_run.version_not_runnable",
            f"{version} is {version.status}; runs evaluate validated or staged versions.",
        )
    policy = policy_of(version.adapter)
    if policy is None:
        raise Conflict(
            "eval_run.no_policy",
            f"Adapter '{version.adapter.name}' has no eval policy: set one with a suite first.",
        )
    # The suite version the policy holds (an owner's choice), never the suite's latest upload:
    # whoever uploads the adapter's versions may upload suite versions too.
    suite_version = policy.suite_version
    with transaction.atomic():
        AdapterVersion.objects.select_for_update().get(pk=version.pk)  # one start at a time
        open_run = EvalRun.objects.filter(
            version=version,
            suite_version=suite_version,
            status__in=(RunStatus.QUEUED, RunStatus.RUNNING),
        ).first()
        if open_run is not None:
            return open_run, False
        engines = sorted(
            Engine.objects.filter(base_model_id=version.adapter.base_model_id).values_list(
                "name", flat=True
            )
        )
        run = run_create(
            version=version,
            suite_version=suite_version,
            baseline=baseline_of(version),
            engines=engines,
            started_by=started_by,
        )
        transaction.on_commit(lambda: _enqueue(run.pk))
    return run, True


def run_request(*, access: Any, version: AdapterVersion) -> tuple[EvalRun, bool]:
    """A run on demand (API, page, CLI), by whoever may upload the adapter's versions."""
    access.require_start_eval_run(version.adapter)
    return run_start(version=version, started_by=access.user)


def _enqueue(run_id: int) -> None:
    task_named("evals.tasks.eval_run_execute").delay(run_id)


def run_claim(run_id: int, task_id: str) -> EvalRun | None:
    """queued -> running for this task, or the run this same task claimed before (redelivered
    after its worker died); None when another task holds it or it is closed."""
    now = timezone.now()
    claimed = EvalRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, started_at=now, claimed_by=task_id, heartbeat_at=now
    )
    if not claimed:  # this task's own claim, delivered again: alive again
        claimed = EvalRun.objects.filter(
            pk=run_id, status=RunStatus.RUNNING, claimed_by=task_id
        ).update(heartbeat_at=now)
    if not claimed:
        return None
    return EvalRun.objects.select_related("version__adapter__tenant", "version__tenant").get(
        pk=run_id
    )


def run_beat(run_id: int, task_id: str) -> bool:
    """Mark the run alive for the task holding it; False when the task holds it no more."""
    return bool(
        EvalRun.objects.filter(pk=run_id, status=RunStatus.RUNNING, claimed_by=task_id).update(
            heartbeat_at=timezone.now()
        )
    )


def runs_requeue_stale() -> list[int]:
    """Queue again each running run whose worker stopped marking it alive (killed, its node
    gone): its claim is dropped in a conditional update (a beat that raced it leaves it), the
    requeue is audited, and its task is sent after commit. The runs queued again."""
    stale_before = timezone.now() - timedelta(seconds=settings.EVAL_RUN_CLAIM_STALE_SECONDS)
    requeued = []
    for run in EvalRun.objects.filter(
        status=RunStatus.RUNNING, heartbeat_at__lt=stale_before
    ).select_related("version__tenant"):
        with transaction.atomic():
            taken = EvalRun.objects.filter(
                pk=run.pk,
                status=RunStatus.RUNNING,
                claimed_by=run.claimed_by,
                heartbeat_at=run.heartbeat_at,
            ).update(status=RunStatus.QUEUED, claimed_by="", heartbeat_at=None)
            if not taken:
                continue
            record_event(
                action="eval_run.requeued",
                actor="eval-runner",
                tenant=run.version.tenant,
                obj=run,
                before={"claimed_by": run.claimed_by, "heartbeat_at": str(run.heartbeat_at)},
                after={"status": RunStatus.QUEUED, "cases_done": run.cases_done},
            )
            transaction.on_commit(partial(_enqueue, run.pk))
        log.warning("eval run %s: no heartbeat since %s, queued again", run.pk, run.heartbeat_at)
        requeued.append(run.pk)
    return requeued


def promote_for_eval(version: AdapterVersion) -> AdapterVersion:
    """The candidate's files in the content-addressed serving store (the approval's own copy,
    safe to repeat). A validated version with serving keys may be held by engines for the run
    (workers.selectors.holdable); its status is unchanged, and the gateway's tables, which
    carry active versions only, never route /v1/ to it."""
    keys = promote_to_serving(version)
    if version.serving_keys == keys:
        return version
    with transaction.atomic():
        updated = AdapterVersion.objects.filter(pk=version.pk, status__in=RUNNABLE_STATUSES).update(
            serving_keys=keys
        )
        if updated:
            record_event(
                action="version.promoted_for_eval",
                actor="eval-runner",
                tenant=version.tenant,
                obj=version,
                after={"serving_keys": keys},
            )
    version.refresh_from_db()
    return version


def run_execute(run_id: int, task_id: str) -> EvalRun | None:
    """The task's whole job; None when the run is not this task's to run."""
    run = run_claim(run_id, task_id)
    if run is None:
        return None
    error = ""
    # The run's span (in a trace of its own, linked to the version's upload) holds its case
    # counts once it is closed.
    with version_span(
        "eval",
        run.version,
        **{"lora_portal.eval_run": run.pk, "lora_portal.eval_run.number": run.number},
    ):
        try:
            version = promote_for_eval(run.version)
            at_lower_priority(lambda: asyncio.run(_ask_alive(run, version, task_id)))
        except ClaimLost:
            log.warning("eval run %s: claimed by another task meanwhile; this one stops", run_id)
            return None
        except Exception as exc:  # noqa: BLE001 - the run closes with the reason, not stuck
            error = f"{type(exc).__name__}: {exc}"[:2000]
        finished = run_finish(run=run, error=error)
        telemetry.annotate(run_counts(finished))
    return finished


def run_counts(run: EvalRun) -> dict[str, Any]:
    """A closed run's counts as span attributes: its cases (total, done, scored), the answers
    that passed and the answers that failed with an error on each side, and the verdict. Counts only, never content."""
    summary = run.summary or {}
    passed = summary.get("passed") or {}
    failed = summary.get("failed") or {}
    out: dict[str, Any] = {
        "lora_portal.eval_run.status": str(run.status),
        "lora_portal.eval_run.cases_total": run.cases_total,
        "lora_portal.eval_run.cases_done": run.cases_done,
        "lora_portal.eval_run.cases_scored": int(summary.get("scored") or 0),
        "lora_portal.eval_run.passed": bool((run.verdict or {}).get("passed")),
    }
    for side in SIDES:
        out[f"lora_portal.eval_run.{side}.passed"] = int(passed.get(side) or 0)
        out[f"lora_portal.eval_run.{side}.errors"] = sum((failed.get(side) or {}).values())
    return out


def at_lower_priority(work: Callable[[], None]) -> None:
    """`work` in a thread of its own whose CPU priority is EVAL_RUN_NICE lower than this one's
    (Linux keeps nice per thread, and the threads it starts inherit it: the run's gateway path,
    its scoring, its database calls' executor), so that where the worker shares cores with the
    gateway and the engines, live requests win the CPU an eval run would take. Its exception is
    raised here; its database connections are closed when it ends."""
    failed: list[BaseException] = []

    def lowered() -> None:
        try:
            if settings.EVAL_RUN_NICE:
                tid = threading.get_native_id()
                now = os.getpriority(os.PRIO_PROCESS, tid)
                os.setpriority(os.PRIO_PROCESS, tid, min(19, now + settings.EVAL_RUN_NICE))
            work()
        except BaseException as exc:  # noqa: BLE001 - raised again in the task's thread
            failed.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=lowered, name="eval-run", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


async def _ask_alive(run: EvalRun, version: AdapterVersion, task_id: str) -> None:
    """ask_cases, marking the run alive meanwhile; ClaimLost (the asking cancelled) when the
    run was queued again and another task holds it."""
    from evals.services.asking import ask_cases

    beat = database_sync_to_async(run_beat)
    asking = asyncio.ensure_future(ask_cases(run, version))
    try:
        while True:
            done, _ = await asyncio.wait({asking}, timeout=settings.EVAL_RUN_HEARTBEAT_SECONDS)
            if done:
                asking.result()
                return
            if not await beat(run.pk, task_id):
                raise ClaimLost
    finally:
        if not asking.done():
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)
