"""The eval gate's part of a version's compliance record (portal.evidence) and its check against
the live portal (portal.evidence_check).

Each run carries the digest of its cases (every answer and every scorer's verdict, both sides),
which run_finish also wrote into the chained audit event `eval_run.finish`. A verdict changed in
the database afterwards no longer gives that digest, and the record's check says which run.

Each release plan that named the version (as candidate or stable) carries every step with its
samples and guard figures, and every decision with the numbers it was taken on; each decision
was also written, with those numbers, into a chained audit event (`release_plan.<action>`), so a
decision changed in the database afterwards no longer matches its event and the check says so.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from adapters.models import AdapterVersion
from core.audit_models import AuditEvent
from evals.models import EvalRun, ReleaseDecision, ReleasePlan
from evals.selectors import cases_digest, run_summary

RUN_OBJECT_TYPE = "evals.evalrun"
PLAN_OBJECT_TYPE = "evals.releaseplan"
# The actions a ReleaseDecision records, each also audited as `release_plan.<action>`.
DECISION_ACTIONS = ("advance", "complete", "rollback", "pause", "resume")


def evals_section(version: AdapterVersion) -> dict[str, Any]:
    runs = (
        EvalRun.objects.filter(version=version)
        .select_related("suite_version__suite")
        .order_by("number")
    )
    return {
        "runs": [
            {
                "number": run.number,
                "status": run.status,
                "suite": run.suite_version.suite.name,
                "suite_version": run.suite_version.number,
                "suite_sha256": run.suite_sha256,
                "version_sha256": run.version_sha256,
                "base_model": run.base_model,
                "baseline": run.baseline,
                "engines": run.engines,
                "policy": run.policy,
                "verdict": run.verdict,
                "summary": run_summary(run).as_dict(),
                "cases_sha256": cases_digest(run),
                "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            }
            for run in runs
        ],
        "release_plans": [plan_entry(plan, version) for plan in _plans_of(version)],
    }


def _at(value: Any) -> str | None:
    return value.isoformat() if value else None


def _plans_of(version: AdapterVersion) -> Any:
    return (
        ReleasePlan.objects.filter(Q(candidate=version) | Q(stable=version))
        .select_related("alias__tenant", "stable__adapter", "candidate__adapter", "created_by")
        .prefetch_related("step_rows", "decisions__actor")
        .order_by("pk")
    )


def _label(version: AdapterVersion) -> str:
    return f"{version.adapter.name}@{version.number}"


def decision_entry(decision: ReleaseDecision) -> dict[str, Any]:
    return {
        "step": decision.step,
        "action": decision.action,
        "automatic": decision.automatic,
        "actor": decision.actor.get_username() if decision.actor else "release-controller",
        "reason": decision.reason,
        "numbers": decision.numbers,
        "at": _at(decision.created_at),
    }


def plan_entry(plan: ReleasePlan, version: AdapterVersion) -> dict[str, Any]:
    """One plan as the record keeps it: its settings, every step's samples and guard figures,
    every decision with its numbers."""
    return {
        "id": plan.pk,
        "alias": f"{plan.alias.tenant.slug}/{plan.alias.name}",
        "role": "candidate" if plan.candidate_id == version.pk else "stable",
        "stable": _label(plan.stable),
        "candidate": _label(plan.candidate),
        "steps": plan.steps,
        "min_step_seconds": plan.min_step_seconds,
        "min_step_samples": plan.min_step_samples,
        "sample_share": plan.sample_share,
        "alpha": plan.alpha,
        "margin": plan.margin,
        "status": plan.status,
        "reason": plan.reason,
        "started_by": plan.created_by.get_username() if plan.created_by else None,
        "started_at": _at(plan.created_at),
        "finished_at": _at(plan.finished_at),
        "step_rows": [
            {
                "index": step.index,
                "weight": step.weight,
                "started_at": _at(step.started_at),
                "ended_at": _at(step.ended_at),
                "outcome": step.outcome,
                "samples": {
                    "stable": {"n": step.stable_n, "passed": step.stable_passed},
                    "candidate": {"n": step.candidate_n, "passed": step.candidate_passed},
                },
                "guards": step.guards,
                # A shadow step's pairs by the judge's outcome and its skipped requests.
                **(
                    {"shadow": {"pairs": step.pairs, "skipped": step.shadow_skipped}}
                    if step.weight == 0
                    else {}
                ),
            }
            for step in plan.step_rows.all()
        ],
        "decisions": [decision_entry(d) for d in plan.decisions.all()],
    }


def plan_event_ids(version: AdapterVersion) -> list[str]:
    """How the audit log names the plans that named the version (`tenant/alias#id`)."""
    return [f"{plan.alias.tenant.slug}/{plan.alias.name}#{plan.pk}" for plan in _plans_of(version)]


def run_event_ids(version: AdapterVersion) -> list[str]:
    """The audit object ids of the version's runs (the record carries their events too)."""
    return [str(pk) for pk in EvalRun.objects.filter(version=version).values_list("pk", flat=True)]


def evals_problems(version: AdapterVersion, section: dict[str, Any] | None) -> list[str]:
    """Each run of the record whose cases are no longer those it finished with."""
    problems = []
    runs = {r.number: r for r in EvalRun.objects.filter(version=version)}
    for entry in (section or {}).get("runs", []):
        run = runs.get(entry.get("number"))
        if run is None:
            problems.append(f"eval run {entry.get('number')}: not a run of this version")
            continue
        now = cases_digest(run)
        finished = (
            AuditEvent.objects.filter(
                object_type=RUN_OBJECT_TYPE, object_id=str(run.pk), action="eval_run.finish"
            )
            .values_list("after", flat=True)
            .first()
        )
        chained = (finished or {}).get("cases_sha256")
        if chained is not None and now != chained:
            problems.append(
                f"eval run {run.number}: its cases or verdicts changed after it finished"
            )
        if entry.get("cases_sha256") != now:
            problems.append(f"eval run {run.number}: its cases differ from the record's")
    return problems + release_problems(version, section)


def _decision_figures(action: str, step: Any, numbers: Any, reason: Any) -> tuple[Any, ...]:
    return (action, step, (numbers or {}).get("guards"), reason)


def release_problems(version: AdapterVersion, section: dict[str, Any] | None) -> list[str]:
    """Each plan of the record whose decisions differ from the portal's rows, or whose rows no
    longer match the chained audit events they were written with."""
    problems = []
    plans = {p.pk: p for p in _plans_of(version)}
    for entry in (section or {}).get("release_plans", []):
        plan = plans.get(entry.get("id"))
        if plan is None:
            problems.append(f"release plan {entry.get('id')}: not a plan of this version")
            continue
        rows = [decision_entry(d) for d in plan.decisions.all()]
        if entry.get("decisions") != rows[: len(entry.get("decisions") or [])]:
            problems.append(f"release plan {plan.pk}: its decisions differ from the record's")
        label = f"{plan.alias.tenant.slug}/{plan.alias.name}#{plan.pk}"
        chained = [
            _decision_figures(
                e.action.removeprefix("release_plan."),
                (e.before or {}).get("step"),
                e.after,
                (e.after or {}).get("reason"),
            )
            for e in AuditEvent.objects.filter(
                object_type=PLAN_OBJECT_TYPE,
                object_id=label,
                action__in=[f"release_plan.{a}" for a in DECISION_ACTIONS],
            ).order_by("id")
        ]
        kept = [_decision_figures(d["action"], d["step"], d["numbers"], d["reason"]) for d in rows]
        if kept != chained:
            problems.append(
                f"release plan {plan.pk}: its decisions changed after they were audited"
            )
    return problems
