"""Reads of the eval gate (suites, policies, runs and their cases, the gate's verdict) and of
release plans."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db.models import QuerySet

from adapters.models import Adapter, AdapterVersion
from core.errors import NotFound
from evals.models import (
    CaseSide,
    EvalCaseResult,
    EvalPolicy,
    EvalRun,
    EvalSuite,
    GateRefusal,
    ReleasePlan,
    ReleaseSample,
    RunStatus,
)
from evals.scoring import verdicts as v
from tenants.models import Tenant


def suites_of(*, tenant: Tenant) -> QuerySet[EvalSuite]:
    return EvalSuite.objects.filter(tenant=tenant).prefetch_related("versions")


def policy_of(adapter: Adapter) -> EvalPolicy | None:
    return (
        EvalPolicy.objects.select_related("suite", "suite_version__suite", "suite_version_set_by")
        .filter(adapter=adapter)
        .first()
    )


def policy_get(*, adapter: Adapter) -> EvalPolicy:
    policy = policy_of(adapter)
    if policy is None:
        raise NotFound("eval_policy.not_found", f"Adapter '{adapter.name}' has no eval policy.")
    return policy


def policy_terms(policy: EvalPolicy) -> v.Policy:
    return v.Policy.from_mapping(vars(policy))


def runs_of(*, version: AdapterVersion) -> QuerySet[EvalRun]:
    return EvalRun.objects.filter(version=version).select_related("suite_version__suite")


def run_get(*, version: AdapterVersion, number: int) -> EvalRun:
    run = runs_of(version=version).filter(number=number).first()
    if run is None:
        raise NotFound("eval_run.not_found", f"Version {version} has no eval run {number}.")
    return run


def latest_run(*, version: AdapterVersion, suite_version_id: int | None = None) -> EvalRun | None:
    """The version's latest run; on one suite version when named (the gate's: the one its
    policy holds, so a run on any other version of the suite never counts)."""
    runs = runs_of(version=version)
    if suite_version_id is not None:
        runs = runs.filter(suite_version_id=suite_version_id)
    return runs.order_by("-number").first()


def refused_by(*, version: AdapterVersion) -> list[int]:
    """The users the gate refused on `version`, at every refusal (the override's rule)."""
    return list(
        GateRefusal.objects.filter(version=version).values_list("actor_id", flat=True).distinct()
    )


def newer_suite_version(policy: EvalPolicy) -> Any:
    """The suite's latest version when it is newer than the one the policy holds (the gate's
    until an owner moves the policy to it), else None."""
    latest = policy.suite.versions.order_by("-number").first()
    return latest if latest is not None and latest.pk != policy.suite_version_id else None


def _cases_with_outcomes(
    run: EvalRun,
) -> list[tuple[dict[str, Any], dict[str, Any], v.CaseOutcome]]:
    results: dict[tuple[str, str], EvalCaseResult] = {
        (r.case_id, r.side): r for r in EvalCaseResult.objects.filter(run=run)
    }
    out = []
    for case in run.suite_version.cases:
        sides = {side: _side(results.get((case["id"], side))) for side in CaseSide.values}
        out.append((case, sides, _outcome(case, sides)))
    return out


def case_rows(run: EvalRun) -> list[dict[str, Any]]:
    """Every case of the run's suite, with each side's result (None until it ran), in file
    order: what the side-by-side shows and the export carries."""
    rows = []
    for case, sides, outcome in _cases_with_outcomes(run):
        ran = {side: sides[side] is not None for side in (v.CANDIDATE, v.BASELINE)}
        passed = {side: outcome.passed(side) if ran[side] else None for side in ran}
        rows.append(
            {
                "id": case["id"],
                "tags": case.get("tags", []),
                "must_pass": case.get("must_pass", False),
                "input": case.get("messages") or case.get("prompt"),
                "expect": case.get("expect", {}),
                "candidate": sides[CaseSide.CANDIDATE],
                "baseline": sides[CaseSide.BASELINE],
                "pairwise": outcome.pairwise,
                "passed": passed,
                "regressed": bool(passed[v.BASELINE]) and passed[v.CANDIDATE] is False,
            }
        )
    return rows


def _side(result: EvalCaseResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {
        "answer": result.answer,
        "verdicts": result.verdicts,
        "error": result.error,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "latency_ms": result.latency_ms,
        "engine": result.engine,
    }


def _passes(side: dict[str, Any] | None) -> dict[str, bool] | None:
    if side is None or side["error"]:
        return None
    return {name: bool(verdict["passed"]) for name, verdict in side["verdicts"].items()}


def _outcome(case: dict[str, Any], sides: dict[str, Any]) -> v.CaseOutcome:
    judge = sides[CaseSide.JUDGE]
    return v.CaseOutcome(
        id=case["id"],
        must_pass=case.get("must_pass", False),
        candidate=_passes(sides[CaseSide.CANDIDATE]),
        baseline=_passes(sides[CaseSide.BASELINE]),
        pairwise=(judge["answer"] or None) if judge and not judge["error"] else None,
    )


def cases_digest(run: EvalRun) -> str:
    """sha256 of every case's answers and verdicts, both sides, canonical JSON: what the run's
    finish event keeps in the audit chain (evals.records checks it)."""
    text = json.dumps(case_rows(run), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def run_summary(run: EvalRun) -> v.Summary:
    """The summary, computed from the stored cases (never from a stored summary, which a
    database writer could have changed)."""
    return v.summarize(outcome for _, _, outcome in _cases_with_outcomes(run))


def failures_by_reason(run: EvalRun) -> dict[str, dict[str, int]]:
    """The answers that failed, per side, counted by their reason's code (`engine_error`,
    `rate_limit_exceeded`, ...): a run that lost an engine says how many cases it cost."""
    failed: dict[str, dict[str, int]] = {}
    for side, error in (
        EvalCaseResult.objects.filter(run=run).exclude(error="").values_list("side", "error")
    ):
        reason = error.split(":", 1)[0].strip() or "error"
        counts = failed.setdefault(side, {})
        counts[reason] = counts.get(reason, 0) + 1
    return failed


def run_summary_dict(run: EvalRun) -> dict[str, Any]:
    """The summary as the API and the pages show it: scores, and the failed answers by reason."""
    return {**run_summary(run).as_dict(), "failed": failures_by_reason(run)}


def gate_verdict(*, version: AdapterVersion, policy: EvalPolicy) -> dict[str, Any]:
    """The gate on `version` now: the latest run on the suite version the policy holds, against
    the policy as it is. {passed, criteria, run} (run: its number, or None when none has
    finished)."""
    run = latest_run(version=version, suite_version_id=policy.suite_version_id)
    if run is None or run.status != RunStatus.FINISHED:
        state = "no run has started" if run is None else f"run {run.number} is {run.status}"
        return {
            "passed": False,
            "run": run.number if run else None,
            "criteria": [
                {
                    "name": "run_finished",
                    "required": True,
                    "actual": False,
                    "passed": False,
                    "message": f"no eval run on suite {policy.suite_version} has finished "
                    f"({state})",
                }
            ],
        }
    verdict = v.gate(run_summary(run), policy_terms(policy))
    return {**verdict, "run": run.number}


# --- release plans ---


def release_plans_of(*, alias: Any) -> QuerySet[ReleasePlan]:
    """An alias's release plans, newest first, with their steps and decisions."""
    return (
        ReleasePlan.objects.filter(alias=alias)
        .select_related("stable__adapter", "candidate__adapter", "alias__tenant")
        .prefetch_related("step_rows", "decisions")
        .order_by("-id")
    )


def release_plan_get(*, alias: Any, plan_id: int) -> ReleasePlan:
    plan = release_plans_of(alias=alias).filter(pk=plan_id).first()
    if plan is None:
        raise NotFound("release.not_found", f"Alias '{alias.name}' has no release plan {plan_id}.")
    return plan


def release_samples_of(*, plan: ReleasePlan) -> QuerySet[ReleaseSample]:
    return ReleaseSample.objects.filter(plan=plan).order_by("-id")
