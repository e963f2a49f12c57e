"""Setting an adapter's eval policy (what its versions must meet before approval), audited.

The policy holds one suite version, chosen by an owner. Maintainers upload suite versions (and
the adapter's versions): were the gate to follow a suite's latest version, the uploader could
rewrite the suite that judges them. So a new suite version becomes the gate's only when an owner
moves the policy to it (`eval_policy.suite_moved`, on top of `eval_policy.set`).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from adapters.models import Adapter
from core.audit import record_event
from core.errors import ApplicationError, NotFound, clean_or_raise
from evals.models import EvalPolicy, EvalSuite, EvalSuiteVersion
from evals.scoring.live_checks import check_live_checks
from evals.scoring.scorers import ExpectError
from tenants.access_port import Access

# Each field and its value when a PUT leaves it out (a PUT replaces the whole policy).
POLICY_DEFAULTS: dict[str, Any] = {
    "min_pass_rate": None,
    "max_regression_points": None,
    "min_pairwise_win_or_tie": None,
    "pairwise_ties_pass": False,
    "judge": "",
    "rubric": "",
    "live_checks": {},
}
POLICY_FIELDS = tuple(POLICY_DEFAULTS)


def policy_snapshot(policy: EvalPolicy | None) -> dict[str, Any]:
    if policy is None:
        return {}
    pinned = policy.suite_version
    return {
        "suite": policy.suite.name,
        "suite_version": pinned.number,
        "suite_sha256": pinned.sha256,
        **{f: getattr(policy, f) for f in POLICY_FIELDS},
    }


def _pinned(*, suite: EvalSuite, number: int | None, policy: EvalPolicy | None) -> EvalSuiteVersion:
    """The suite version the policy holds after this change: the one named; else the one it
    holds already (same suite: saving the thresholds never moves the gate to a newer upload);
    else, for a suite chosen now, its latest version."""
    if number is not None:
        found = suite.versions.filter(number=number).first()
        if found is None:
            raise NotFound(
                "suite.version_not_found", f"Suite '{suite.name}' has no version {number}."
            )
        return found
    if policy is not None and policy.suite_id == suite.pk:
        return policy.suite_version
    latest = suite.versions.order_by("-number").first()
    if latest is None:
        raise NotFound("suite.not_found", f"Suite '{suite.name}' has no version yet.")
    return latest


def policy_set(
    *,
    access: Access,
    adapter: Adapter,
    suite: str,
    suite_version: int | None = None,
    request_id: str = "",
    **fields: Any,
) -> EvalPolicy:
    access.require_eval_policy_change(adapter)
    try:
        check_live_checks(fields.get("live_checks", {}))
    except ExpectError as exc:
        raise ApplicationError("eval_policy.bad_live_checks", str(exc)) from None
    found = EvalSuite.objects.filter(tenant_id=adapter.tenant_id, name=suite).first()
    if found is None:
        raise NotFound("suite.not_found", f"Tenant '{adapter.tenant.slug}' has no suite '{suite}'.")
    with transaction.atomic():
        policy = (
            EvalPolicy.objects.select_for_update()
            .select_related("suite", "suite_version")
            .filter(adapter=adapter)
            .first()
        )
        before = policy_snapshot(policy)
        pinned = _pinned(suite=found, number=suite_version, policy=policy)
        if policy is None:
            policy = EvalPolicy(tenant_id=adapter.tenant_id, adapter=adapter)
        moved = policy.suite_version_id != pinned.pk
        policy.suite = found
        policy.suite_version = pinned
        if moved:
            policy.suite_version_set_by = access.user
            policy.suite_version_set_at = timezone.now()
        for name in POLICY_FIELDS:
            value = fields.get(name)
            setattr(policy, name, POLICY_DEFAULTS[name] if value is None else value)
        policy.updated_by = access.user
        policy.updated_at = timezone.now()
        clean_or_raise(policy, exclude=["adapter", "tenant", "suite", "suite_version"])
        policy.save()
        label = f"{adapter.tenant.slug}/{adapter.name}"
        record_event(
            action="eval_policy.set",
            actor=access.user,
            tenant=adapter.tenant,
            obj=policy,
            object_id=label,
            before=before,
            after=policy_snapshot(policy),
            request_id=request_id,
        )
        if moved and before:  # a new policy's first pin is in eval_policy.set
            record_event(
                action="eval_policy.suite_moved",
                actor=access.user,
                tenant=adapter.tenant,
                obj=policy,
                object_id=label,
                before={k: before.get(k) for k in ("suite", "suite_version", "suite_sha256")},
                after={
                    "suite": found.name,
                    "suite_version": pinned.number,
                    "suite_sha256": pinned.sha256,
                },
                request_id=request_id,
            )
    return policy
