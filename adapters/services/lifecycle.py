"""The version lifecycle: each transition is one function, in one transaction, audited.

uploaded -> validating -> validated -> (approve) -> staged -> (release) -> active -> disabled
                       \\-> rejected          \\-> (reject) -> rejected            \\-> retired
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from adapters import approval_checks
from adapters.approval_checks import ApprovalOverride
from adapters.models import AdapterVersion, Decision, DecisionKind, VersionStatus
from adapters.signals import version_status_changed
from adapters.tracing import traced_step
from core.audit import record_event
from core.errors import ApplicationError, Conflict, PermissionDenied
from core.events import broadcast_after_commit
from tenants.access_port import Access
from tenants.models import SloClass

S = VersionStatus


def _locked(version: AdapterVersion) -> AdapterVersion:
    return (
        AdapterVersion.objects.select_for_update(of=("self",))
        .select_related("adapter", "tenant")
        .get(pk=version.pk)
    )


def _require_status(version: AdapterVersion, allowed: tuple[str, ...], action: str) -> None:
    if version.status not in allowed:
        raise Conflict(
            "version.bad_transition",
            f"Cannot {action} {version} while it is '{version.status}'; "
            f"{action} needs status {' or '.join(allowed)}.",
            current_status=version.status,
        )


def _transition(
    version: AdapterVersion, *, to: str, actor: Any, action: str, request_id: str, **extra: Any
) -> None:
    before = {"status": version.status}
    version.status = to
    for key, value in extra.items():
        setattr(version, key, value)
    version.save()
    label = f"{version.tenant.slug}/{version.adapter.name}@{version.number}"
    record_event(
        action=f"version.{action}",
        actor=actor,
        tenant=version.tenant,
        obj=version,
        object_id=label,
        before=before,
        after={"status": to},
        request_id=request_id,
    )
    version_status_changed.send(
        sender=AdapterVersion, version=version, before=before["status"], after=to, actor=actor
    )
    broadcast_after_commit(
        tenant_id=version.tenant_id,
        event={
            "kind": "version.status",
            "version": f"{version.adapter.name}@{version.number}",
            "from": before["status"],
            "to": to,
        },
    )


def _decide(
    version: AdapterVersion,
    kind: str,
    actor: Any,
    comment: str,
    checked: dict[str, Any] | None = None,
) -> Decision:
    # The evidence is what the decider saw: the validation report and the manifest digest, and
    # what the approval checks showed (approval_checks: the eval gate's verdict).
    evidence = {
        "validation_report": version.validation_report,
        "manifest_sha256": version.manifest_sha256,
        "status": version.status,
        **(checked or {}),
    }
    return Decision.objects.create(
        tenant=version.tenant,
        version=version,
        kind=kind,
        actor=actor,
        comment=comment,
        evidence=evidence,
    )


def version_record_validation(
    *, version: AdapterVersion, report: dict[str, Any], fields: dict[str, Any]
) -> AdapterVersion:
    """validating -> validated or rejected, with the report; `fields` carries the parsed facts."""
    with transaction.atomic():
        locked = _locked(version)
        _require_status(locked, (S.VALIDATING,), "record validation for")
        target = S.VALIDATED if report.get("valid") else S.REJECTED
        _transition(
            locked,
            to=target,
            actor="validator",
            action="validate",
            request_id="",
            validation_report=report,
            validated_at=timezone.now(),
            **fields,
        )
    return locked


@traced_step("approve")
def version_approve(
    *,
    access: Access,
    version: AdapterVersion,
    comment: str = "",
    request_id: str = "",
    override: ApprovalOverride | None = None,
) -> AdapterVersion:
    """validated -> staged, by a reviewer who is not the uploader (access.require_review), once
    every approval check (approval_checks: the eval gate) passes or is overridden; the files are
    promoted to the serving area."""
    from adapters.services.promotion import promote_to_serving

    access.require_review(version, "approve")
    reviewer = access.user
    _require_status(version, (S.VALIDATED,), "approve")
    checked = approval_checks.run_checks(
        version=version, access=access, override=override, request_id=request_id
    )
    # Copy to the content-addressed serving area before the transaction: idempotent, and if it
    # fails nothing in the database has changed.
    serving_keys = promote_to_serving(version)
    with transaction.atomic():
        locked = _locked(version)
        _require_status(locked, (S.VALIDATED,), "approve")
        _decide(locked, DecisionKind.APPROVE, reviewer, comment, checked)
        _transition(
            locked,
            to=S.STAGED,
            actor=reviewer,
            action="approve",
            request_id=request_id,
            serving_keys=serving_keys,
            approved_at=timezone.now(),
        )
    return locked


def version_reject(
    *,
    access: Access,
    version: AdapterVersion,
    reason: str,
    request_id: str = "",
) -> AdapterVersion:
    access.require_review(version, "reject")
    reviewer = access.user
    if not reason or not reason.strip():
        raise ApplicationError(
            "rejection.reason_required",
            "Give a reason for the rejection; the uploader will read it.",
        )
    with transaction.atomic():
        locked = _locked(version)
        _require_status(locked, (S.VALIDATED, S.STAGED), "reject")
        _decide(locked, DecisionKind.REJECT, reviewer, reason.strip())
        _transition(locked, to=S.REJECTED, actor=reviewer, action="reject", request_id=request_id)
    return locked


@traced_step("release")
def version_release(
    *,
    access: Access,
    version: AdapterVersion,
    comment: str = "",
    request_id: str = "",
) -> AdapterVersion:
    """staged -> active by a tenant owner; a gold tenant needs a second approval by someone else.

    For gold, the first call records a release approval and leaves the version staged; the second
    call, by a different owner or a reviewer, activates it (access.release_role decides who is who).
    """
    actor = access.user
    access.require_scope("approve")
    with transaction.atomic():
        locked = _locked(version)
        role = access.release_role(locked.adapter)
        if role is None:
            raise PermissionDenied(
                "release.not_owner", "Only an owner of the tenant may release a version."
            )
        _require_status(locked, (S.STAGED,), "release")
        if locked.tenant.slo_class == SloClass.GOLD:
            approvals = list(locked.decisions.filter(kind=DecisionKind.RELEASE_APPROVAL))
            if not approvals:
                if role != "owner":
                    raise PermissionDenied(
                        "release.not_owner",
                        "An owner must start the release; a reviewer may then give the second approval.",
                    )
                _decide(locked, DecisionKind.RELEASE_APPROVAL, actor, comment)
                record_event(
                    action="version.release_approval",
                    actor=actor,
                    tenant=locked.tenant,
                    obj=locked,
                    object_id=f"{locked.tenant.slug}/{locked.adapter.name}@{locked.number}",
                    after={"approvals": 1, "needed": 2},
                    request_id=request_id,
                )
                return locked
            if any(a.actor_id == actor.pk for a in approvals):
                raise PermissionDenied(
                    "release.second_approval_same_user",
                    "Gold releases need a second approval from someone other than the first approver.",
                )
        _decide(locked, DecisionKind.RELEASE, actor, comment)
        _transition(
            locked,
            to=S.ACTIVE,
            actor=actor,
            action="release",
            request_id=request_id,
            released_at=timezone.now(),
        )
    return locked


@traced_step("disable")
def version_disable(
    *,
    access: Access,
    version: AdapterVersion,
    reason: str = "",
    request_id: str = "",
) -> AdapterVersion:
    """Stop serving at once; the fleet unloads it from every engine (workers.desired)."""
    actor = access.user
    access.require_scope("write")
    with transaction.atomic():
        locked = _locked(version)
        access.require_disable(locked.adapter)
        _require_status(locked, (S.ACTIVE, S.STAGED), "disable")
        _decide(locked, DecisionKind.DISABLE, actor, reason)
        _transition(locked, to=S.DISABLED, actor=actor, action="disable", request_id=request_id)
    return locked
