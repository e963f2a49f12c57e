"""The eval gate, as the registry's approval asks it (adapters/approval_checks.py).

No policy: no gate. Otherwise the latest run on the suite version the policy holds (an owner's
choice, never a newer upload) must have finished and meet the policy as it is now; if not,
approval is refused (409 version.eval_gate_failed, naming each unmet criterion) and the refusal
is kept. An override is a second *person's* written decision: someone other than the uploader
and other than every reviewer the gate refused on this version, in any of their accounts (the
four-eyes rule's reading of a person, adapters/access.py).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from adapters.approval_checks import ApprovalOverride
from adapters.models import AdapterVersion
from core.audit import record_event
from core.errors import ApplicationError, Conflict
from evals.models import GateRefusal
from evals.selectors import gate_verdict, latest_run, policy_of
from evals.services.policies import policy_snapshot
from tenants.access_port import Access


def _label(version: AdapterVersion) -> str:
    return f"{version.tenant.slug}/{version.adapter.name}@{version.number}"


def eval_gate_check(
    *,
    version: AdapterVersion,
    access: Access,
    override: ApprovalOverride | None,
    request_id: str,
) -> dict[str, Any]:
    policy = policy_of(version.adapter)
    if policy is None:
        return {}
    verdict = gate_verdict(version=version, policy=policy)
    run = latest_run(version=version, suite_version_id=policy.suite_version_id)
    seen: dict[str, Any] = {
        "policy": policy_snapshot(policy),
        "run": run.number if run else None,
        "suite_sha256": run.suite_sha256 if run else None,
        "version_sha256": run.version_sha256 if run else None,
        "verdict": verdict,
        "override": None,
    }
    if verdict["passed"]:
        return {"eval_gate": seen}
    if override is None:
        _refuse(version=version, access=access, run=run, verdict=verdict, request_id=request_id)
    assert override is not None  # _refuse raised otherwise
    seen["override"] = _override(
        version=version, access=access, override=override, verdict=verdict, request_id=request_id
    )
    return {"eval_gate": seen}


def unmet(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in verdict["criteria"] if not c["passed"]]


def _refuse(
    *, version: AdapterVersion, access: Access, run: Any, verdict: dict[str, Any], request_id: str
) -> None:
    failed = unmet(verdict)
    with transaction.atomic():  # kept: the refusal is what lets a second reviewer override
        GateRefusal.objects.create(
            tenant=version.tenant, version=version, run=run, actor=access.user, verdict=verdict
        )
        record_event(
            action="version.eval_gate_refused",
            actor=access.user,
            tenant=version.tenant,
            obj=version,
            object_id=_label(version),
            after={"run": verdict["run"], "unmet": [c["name"] for c in failed]},
            request_id=request_id,
        )
    raise Conflict(
        "version.eval_gate_failed",
        f"The eval gate refuses {version.adapter.name}@{version.number}: "
        + "; ".join(c["message"] for c in failed)
        + ". Another reviewer may override it with a written reason.",
        unmet=failed,
        run=verdict["run"],
    )


def _override(
    *,
    version: AdapterVersion,
    access: Access,
    override: ApprovalOverride,
    verdict: dict[str, Any],
    request_id: str,
) -> dict[str, Any]:
    reason = override.reason.strip()
    if not reason:
        raise ApplicationError(
            "eval_gate.override_reason_required",
            "An override of the eval gate needs a written reason.",
        )
    refusals = list(
        GateRefusal.objects.filter(version=version).select_related("actor").order_by("id")
    )
    if not refusals:
        raise Conflict(
            "eval_gate.override_needs_first_review",
            "An override is a second reviewer's decision: approve first, and another reviewer "
            "may override if the gate refuses.",
        )
    # Every refusal, not only the latest: a refused reviewer overrides through no account of theirs.
    access.require_eval_gate_override(version, [r.actor_id for r in refusals])
    given = {
        "by": access.user.get_username(),
        "reason": reason,
        "first_reviewer": refusals[0].actor.get_username(),
        "unmet": [c["name"] for c in unmet(verdict)],
    }
    record_event(
        action="version.eval_gate_override",
        actor=access.user,
        tenant=version.tenant,
        obj=version,
        object_id=_label(version),
        after=given,
        request_id=request_id,
    )
    return given
