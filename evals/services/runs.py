"""A run's record: created naming what it evaluates, each case's answer recorded once per side,
finished with its summary and the gate's verdict at that time. The runner (the part that asks
the engines) calls these; a case already recorded is never recorded again, so a resumed run
skips it."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from adapters.models import AdapterVersion
from core.audit import record_event
from core.errors import Conflict
from core.events import broadcast_after_commit
from evals.models import CaseSide, EvalCaseResult, EvalRun, EvalSuiteVersion, RunStatus
from evals.scoring import verdicts as v
from evals.scoring.scorers import score_answer
from evals.selectors import cases_digest, policy_of, run_summary, run_summary_dict
from evals.services.policies import policy_snapshot


def run_create(
    *,
    version: AdapterVersion,
    suite_version: EvalSuiteVersion,
    baseline: str,
    engines: list[str],
    started_by: Any = None,
) -> EvalRun:
    with transaction.atomic():
        locked = AdapterVersion.objects.select_for_update().get(pk=version.pk)
        latest = EvalRun.objects.filter(version=locked).order_by("-number").first()
        run = EvalRun.objects.create(
            tenant_id=locked.tenant_id,
            version=locked,
            suite_version=suite_version,
            number=(latest.number if latest else 0) + 1,
            version_sha256=locked.manifest_sha256,
            suite_sha256=suite_version.sha256,
            base_model=version.adapter.base_model.name,
            baseline=baseline,
            engines=engines,
            policy=policy_snapshot(policy_of(version.adapter)),
            cases_total=suite_version.case_count,
            started_by=started_by,
        )
        record_event(
            action="eval_run.create",
            actor=started_by or "eval-runner",
            tenant=version.tenant,
            obj=run,
            after={"suite_sha256": run.suite_sha256, "baseline": baseline, "engines": engines},
        )
    return run


def run_record_case(
    *,
    run: EvalRun,
    case: dict[str, Any],
    side: str,
    answer: str = "",
    error: str = "",
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    latency_ms: float = 0.0,
    engine: str = "",
) -> bool:
    """Record one side's answer with each scorer's verdict; False when it was already recorded
    (a redelivered or resumed case), which changes nothing."""
    if run.status in (RunStatus.FINISHED, RunStatus.FAILED):
        raise Conflict("eval_run.closed", f"Run {run.number} is {run.status}; it never changes.")
    scored = side in (CaseSide.CANDIDATE, CaseSide.BASELINE) and not error
    verdicts = (
        {name: verdict.as_dict() for name, verdict in score_answer(answer, case["expect"]).items()}
        if scored
        else {}
    )
    try:
        with transaction.atomic():
            EvalCaseResult.objects.create(
                run=run,
                case_id=case["id"],
                side=side,
                answer=answer,
                verdicts=verdicts,
                error=error,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                latency_ms=latency_ms,
                engine=engine,
            )
            if side == CaseSide.CANDIDATE:
                EvalRun.objects.filter(pk=run.pk).update(cases_done=F("cases_done") + 1)
                _progress(run, RunStatus.RUNNING)
    except IntegrityError:
        return False
    return True


def _progress(run: EvalRun, status: str) -> None:
    """Tell the version's live pages (static/portal/pages.js refreshes the eval panel)."""
    version = run.version
    broadcast_after_commit(
        tenant_id=run.tenant_id,
        event={
            "kind": "eval.progress",
            "version": f"{version.adapter.name}@{version.number}",
            "run": run.number,
            "status": status,
        },
    )


def run_finish(*, run: EvalRun, error: str = "") -> EvalRun:
    """Close the run: its summary and the verdict against the policy it started with."""
    with transaction.atomic():
        locked = EvalRun.objects.select_for_update().get(pk=run.pk)
        if locked.status in (RunStatus.FINISHED, RunStatus.FAILED):
            return locked
        summary = run_summary(locked)
        locked.summary = run_summary_dict(locked)
        locked.verdict = v.gate(summary, v.Policy.from_mapping(locked.policy))
        locked.status = RunStatus.FAILED if error else RunStatus.FINISHED
        locked.error = error
        locked.finished_at = timezone.now()
        locked.save()
        _progress(locked, locked.status)
        version = locked.version
        record_event(
            action="eval_run.finish",
            actor="eval-runner",
            tenant=version.tenant,
            obj=locked,
            # The digest of every answer and verdict, in the chain: a verdict changed later is
            # caught (evals.records).
            after={
                "status": locked.status,
                "passed": locked.verdict["passed"],
                "cases_sha256": cases_digest(locked),
            },
        )
    return locked
