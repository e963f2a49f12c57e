"""The eval gate's part of a version's compliance record (portal.evidence) and its check against
the live portal (portal.evidence_check).

Each run carries the digest of its cases (every answer and every scorer's verdict, both sides),
which run_finish also wrote into the chained audit event `eval_run.finish`. A verdict changed in
the database afterwards no longer gives that digest, and the record's check says which run.
"""

from __future__ import annotations

from typing import Any

from adapters.models import AdapterVersion
from core.audit_models import AuditEvent
from evals.models import EvalRun
from evals.selectors import cases_digest, run_summary

RUN_OBJECT_TYPE = "evals.evalrun"


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
        ]
    }


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
