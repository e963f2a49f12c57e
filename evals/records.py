"""The eval gate's part of a version's compliance record (portal.evidence) and its check against
the live portal (portal.evidence_check): its eval runs, and the release plans it was the candidate
of, with every step's guard figures and every decision.

Each run carries the digest of its cases (every answer and every scorer's verdict, both sides),
which run_finish also wrote into the chained audit event `eval_run.finish`. A verdict changed in
the database afterwards no longer gives that digest, and the record's check says which run.
"""

from __future__ import annotations

from typing import Any

from adapters.models import AdapterVersion
from core.audit_models import AuditEvent
from evals.models import EvalRun, ReleasePlan
from evals.selectors import cases_digest, run_summary

RUN_OBJECT_TYPE = "evals.evalrun"
PLAN_OBJECT_TYPE = "evals.releaseplan"


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
        "release_plans": release_plans_section(version),
    }


def _at(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _plans(version: AdapterVersion) -> Any:
    return (
        ReleasePlan.objects.filter(candidate=version)
        .select_related("alias__tenant", "stable__adapter")
        .prefetch_related("step_rows", "decisions__actor")
        .order_by("pk")
    )


def release_plans_section(version: AdapterVersion) -> list[dict[str, Any]]:
    """Every release plan of the version, each step with its samples, guard figures and outcome,
    and every decision with the numbers it was taken on."""
    return [
        {
            "id": plan.pk,
            "alias": plan.alias.name,
            "stable": f"{plan.stable.adapter.name}@{plan.stable.number}",
            "status": plan.status,
            "steps": plan.steps,
            "min_step_seconds": plan.min_step_seconds,
            "min_step_samples": plan.min_step_samples,
            "sample_share": plan.sample_share,
            "alpha": plan.alpha,
            "margin": plan.margin,
            "reason": plan.reason,
            "created_at": _at(plan.created_at),
            "finished_at": _at(plan.finished_at),
            "step_rows": [
                {
                    "index": step.index,
                    "weight": step.weight,
                    "started_at": _at(step.started_at),
                    "ended_at": _at(step.ended_at),
                    "samples": {
                        "stable": {"n": step.stable_n, "passed": step.stable_passed},
                        "candidate": {"n": step.candidate_n, "passed": step.candidate_passed},
                    },
                    "guards": step.guards,
                    "outcome": step.outcome,
                }
                for step in plan.step_rows.all()
            ],
            "decisions": [
                {
                    "step": d.step,
                    "action": d.action,
                    "automatic": d.automatic,
                    "actor": d.actor.get_username() if d.actor else "release-controller",
                    "reason": d.reason,
                    "numbers": d.numbers,
                    "created_at": _at(d.created_at),
                }
                for d in plan.decisions.all()
            ],
        }
        for plan in _plans(version)
    ]


def plan_event_ids(version: AdapterVersion) -> list[str]:
    """The audit object ids of the version's release plans (`tenant/alias#id`)."""
    return [f"{p.alias.tenant.slug}/{p.alias.name}#{p.pk}" for p in _plans(version)]


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
    return problems
