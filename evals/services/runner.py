"""Starting and running an eval run: created naming what it compares, queued as one Celery task
(evals.tasks.eval_run_execute), claimed queued -> running by that task, the candidate's files
promoted to the serving store for the run, every case not yet recorded asked on both sides
(evals.services.asking), then closed with its verdict.

A redelivered task (its worker died) takes its own claim up again and skips each case already
recorded (EvalCaseResult is unique per run, case and side); any other task leaves a claimed run
alone, so a duplicate start never runs a case twice.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.db import transaction
from django.utils import timezone

from adapters.models import AdapterVersion, VersionStatus
from adapters.services.promotion import promote_to_serving
from core.audit import record_event
from core.errors import Conflict
from core.tasks import task_named
from evals.models import EvalRun, RunStatus
from evals.selectors import policy_of
from evals.services.runs import run_create, run_finish
from workers.models import Engine

RUNNABLE_STATUSES = (VersionStatus.VALIDATED, VersionStatus.STAGED)


def baseline_of(version: AdapterVersion) -> str:
    """What serves the adapter now: its active version as `name@N`, else `base`."""
    active = (
        AdapterVersion.objects.filter(adapter_id=version.adapter_id, status=VersionStatus.ACTIVE)
        .order_by("-number")
        .first()
    )
    return f"{version.adapter.name}@{active.number}" if active else "base"


def run_start(*, version: AdapterVersion, started_by: Any = None) -> tuple[EvalRun, bool]:
    """A new run on the adapter's policy suite, queued after commit; (the run, created). A run
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
    suite_version = policy.suite.versions.order_by("-number").first()
    if suite_version is None:
        raise Conflict("eval_run.empty_suite", f"Suite '{policy.suite.name}' has no version.")
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
    claimed = EvalRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, started_at=timezone.now(), claimed_by=task_id
    )
    run = EvalRun.objects.select_related("version__adapter__tenant", "version__tenant").get(
        pk=run_id
    )
    if claimed or (run.status == RunStatus.RUNNING and run.claimed_by == task_id):
        return run
    return None


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
    from evals.services.asking import ask_cases

    run = run_claim(run_id, task_id)
    if run is None:
        return None
    error = ""
    try:
        version = promote_for_eval(run.version)
        asyncio.run(ask_cases(run, version))
    except Exception as exc:  # noqa: BLE001 - the run closes with the reason, not stuck running
        error = f"{type(exc).__name__}: {exc}"[:2000]
    return run_finish(run=run, error=error)
