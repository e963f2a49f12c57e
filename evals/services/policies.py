"""Setting an adapter's eval policy (what its versions must meet before approval), audited."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from adapters.models import Adapter
from core.audit import record_event
from core.errors import ApplicationError, NotFound, clean_or_raise
from evals.models import EvalPolicy, EvalSuite
from evals.scoring.live_checks import check_live_checks
from evals.scoring.scorers import ExpectError
from tenants.access_port import Access

# Each field and its value when a PUT leaves it out (a PUT replaces the whole policy).
POLICY_DEFAULTS: dict[str, Any] = {
    "min_pass_rate": None,
    "max_regression_points": None,
    "min_pairwise_win_or_tie": None,
    "judge": "",
    "rubric": "",
    "live_checks": {},
}
POLICY_FIELDS = tuple(POLICY_DEFAULTS)


def policy_snapshot(policy: EvalPolicy | None) -> dict[str, Any]:
    if policy is None:
        return {}
    return {"suite": policy.suite.name, **{f: getattr(policy, f) for f in POLICY_FIELDS}}


def policy_set(
    *, access: Access, adapter: Adapter, suite: str, request_id: str = "", **fields: Any
) -> EvalPolicy:
    access.require_adapter(adapter, "release_version")
    try:
        check_live_checks(fields.get("live_checks", {}))
    except ExpectError as exc:
        raise ApplicationError("eval_policy.bad_live_checks", str(exc)) from None
    found = EvalSuite.objects.filter(tenant_id=adapter.tenant_id, name=suite).first()
    if found is None:
        raise NotFound("suite.not_found", f"Tenant '{adapter.tenant.slug}' has no suite '{suite}'.")
    if not found.versions.exists():
        raise NotFound("suite.not_found", f"Suite '{suite}' has no version yet.")
    with transaction.atomic():
        policy = EvalPolicy.objects.select_for_update().filter(adapter=adapter).first()
        before = policy_snapshot(policy)
        if policy is None:
            policy = EvalPolicy(tenant_id=adapter.tenant_id, adapter=adapter, suite=found)
        policy.suite = found
        for name in POLICY_FIELDS:
            setattr(policy, name, fields.get(name, POLICY_DEFAULTS[name]))
        policy.updated_by = access.user
        policy.updated_at = timezone.now()
        clean_or_raise(policy, exclude=["adapter", "tenant", "suite"])
        policy.save()
        record_event(
            action="eval_policy.set",
            actor=access.user,
            tenant=adapter.tenant,
            obj=policy,
            object_id=f"{adapter.tenant.slug}/{adapter.name}",
            before=before,
            after=policy_snapshot(policy),
            request_id=request_id,
        )
    return policy
