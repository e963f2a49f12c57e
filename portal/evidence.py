"""A version's compliance record: everything about one adapter version an auditor asks for,
signed so that it can be handed over and verified later, offline (portal.evidence_signing,
lora_portal_client.evidence), and checked against the live chain (portal.evidence_check).

Sections: the version (manifest, every hash, config, signer), its validation report, every
decision, its releases (alias revisions that named it, with weights, rollbacks), its eval runs
(suite and version hashes, verdicts, the digest of every case) and release plans (every step
with its guard figures, every decision), where and when it served, its
audit events with their chain fields, and the chain's anchor at export time.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db.models import Min, Sum
from django.utils import timezone

from adapters.models import AdapterVersion, Alias, AliasRevision, Decision
from core.audit import event_content
from core.audit_models import AuditChainHead, AuditEvent
from evals.records import (
    PLAN_OBJECT_TYPE,
    RUN_OBJECT_TYPE,
    evals_section,
    plan_event_ids,
    run_event_ids,
)
from gateway.models import DailyUsage
from portal.audit_checkpoint import CheckpointError, read_checkpoint
from portal.evidence_signing import require_signing_key, sign_record
from tenants.models import SigningKey
from workers.models import FleetAction, FleetActionKind, Residency

RECORD_FORMAT = "lora-portal.evidence/1"  # lora_portal_client.evidence checks the same name
VERSION_OBJECT_TYPE = "adapters.adapterversion"
ALIAS_OBJECT_TYPE = "adapters.alias"


def _at(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _signer(version: AdapterVersion) -> dict[str, Any]:
    from adapters.validation.signatures import key_fingerprint

    key = (
        SigningKey.objects.filter(tenant_id=version.tenant_id, name=version.signer).first()
        if version.signer
        else None
    )
    return {
        "signed": bool(version.signature),
        "signer": version.signer,
        "key_fingerprint": key_fingerprint(key.public_key_pem) if key else None,
        "key_revoked_at": _at(key.revoked_at) if key else None,
        "signature": version.signature,
    }


def _version_section(version: AdapterVersion) -> dict[str, Any]:
    return {
        "tenant": version.tenant.slug,
        "adapter": version.adapter.name,
        "number": version.number,
        "name": f"{version.adapter.name}@{version.number}",
        "served_name": version.served_name,
        "status": version.status,
        "base_model": version.adapter.base_model.name,
        "uploaded_by": version.uploaded_by.get_username() if version.uploaded_by else None,
        "created_at": _at(version.created_at),
        "validated_at": _at(version.validated_at),
        "approved_at": _at(version.approved_at),
        "released_at": _at(version.released_at),
        "manifest": version.manifest,
        "manifest_sha256": version.manifest_sha256,
        "size_bytes": version.size_bytes,
        "rank": version.rank,
        "alpha": version.alpha,
        "target_modules": version.target_modules,
        "dtype": version.dtype,
        "config": version.config,
        "signature": _signer(version),
    }


def _decisions(version: AdapterVersion) -> list[dict[str, Any]]:
    return [
        {
            "kind": d.kind,
            "actor": d.actor.get_username(),
            "at": _at(d.created_at),
            "comment": d.comment,
            "saw": d.evidence,  # what the decider was shown (report summary, checks)
        }
        for d in Decision.objects.filter(version=version).select_related("actor")
    ]


def _releases(version: AdapterVersion) -> tuple[list[dict[str, Any]], set[int]]:
    """Alias revisions that named this version (canary weights over time, rollbacks), and the
    aliases they belong to. Filtered here, not by a JSON lookup, so SQLite (the demo) works."""
    rows, alias_ids = [], set()
    revisions = (
        AliasRevision.objects.filter(alias__tenant_id=version.tenant_id)
        .select_related("alias")
        .order_by("created_at", "id")
    )
    for rev in revisions:
        mine = [t for t in rev.targets if t.get("version_id") == version.id]
        if not mine and rev.alias_id not in alias_ids:
            continue
        alias_ids.add(rev.alias_id)
        rows.append(
            {
                "alias": rev.alias.name,
                "revision": rev.number,
                "action": rev.action,
                "actor": rev.actor_label,
                "at": _at(rev.created_at),
                "reason": rev.reason,
                "weight": mine[0].get("weight", 0) if mine else 0,
                "targets": [
                    {"version": t.get("version"), "weight": t.get("weight")} for t in rev.targets
                ],
            }
        )
    return rows, alias_ids


def _served(version: AdapterVersion) -> dict[str, Any]:
    """Where it was loaded (the fleet's action log and residency) and what it served per UTC
    day (the gateway's usage rows; a day is the finest grain kept for good)."""
    engines: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"pool": "", "first_loaded": None, "resident_now": None, "last_used": None}
    )
    loads = (
        FleetAction.objects.filter(version=version, kind=FleetActionKind.LOAD, ok=True)
        .values("engine__name", "engine__pool")
        .annotate(first=Min("created_at"))
    )
    for row in loads:
        engines[row["engine__name"]].update(
            pool=row["engine__pool"], first_loaded=_at(row["first"])
        )
    for res in Residency.objects.filter(version=version).select_related("engine"):
        engines[res.engine.name].update(
            pool=res.engine.pool, resident_now=res.observed_state, last_used=_at(res.last_used_at)
        )
    by_day = [
        {
            "day": row["day"].isoformat(),
            "requests": row["requests"],
            "prompt_tokens": row["prompt_tokens"],
            "completion_tokens": row["completion_tokens"],
        }
        for row in DailyUsage.objects.filter(version=version)
        .values("day")
        .annotate(
            requests=Sum("requests"),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
        )
        .order_by("day")
    ]
    served_days = [d["day"] for d in by_day if d["requests"]]
    return {
        "engines": [{"engine": name, **info} for name, info in sorted(engines.items())],
        "first_request_day": served_days[0] if served_days else None,
        "last_request_day": served_days[-1] if served_days else None,
        "requests": sum(d["requests"] for d in by_day),
        "prompt_tokens": sum(d["prompt_tokens"] for d in by_day),
        "completion_tokens": sum(d["completion_tokens"] for d in by_day),
        "by_day": by_day,
    }


def audit_event_dict(event: AuditEvent) -> dict[str, Any]:
    """An event with everything needed to check it against the chain (exports use it too)."""
    return {
        "id": event.pk,
        **event_content(event),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def _anchor() -> tuple[dict[str, Any], int]:
    head = AuditChainHead.objects.filter(pk=1).first()
    head_id = head.last_event_id if head else 0
    anchor: dict[str, Any] = {
        "chain_head": {"event_id": head_id, "hash": head.last_hash if head else None},
        "checkpoint": None,
        "checkpoint_error": "",
    }
    try:
        checkpoint = read_checkpoint()
    except CheckpointError as exc:
        anchor["checkpoint_error"] = exc.message
    else:
        if checkpoint is not None:
            anchor["checkpoint"] = {
                "event_id": checkpoint.event_id,
                "hash": checkpoint.hash,
                "created_at": checkpoint.created_at,
            }
    return anchor, head_id


def _version_object_ids(version: AdapterVersion) -> list[str]:
    """How the audit log names a version: the registry's services by its label
    (`tenant/adapter@N`, as the version page's history reads them), other writers by its id."""
    label = f"{version.tenant.slug}/{version.adapter.name}@{version.number}"
    return [str(version.pk), label]


def _alias_object_ids(alias_ids: set[int]) -> list[str]:
    """The aliases' ids and their labels (`tenant/alias`, as the alias services write them)."""
    aliases = Alias.objects.filter(pk__in=alias_ids).select_related("tenant")
    return [str(i) for i in alias_ids] + [f"{a.tenant.slug}/{a.name}" for a in aliases]


def evidence_record(*, version: AdapterVersion, generated_by: str) -> dict[str, Any]:
    """The signed record. The anchor is read first and the events up to it, so every event in
    the record is covered by the anchored head."""
    anchor, head_id = _anchor()
    releases, alias_ids = _releases(version)
    events = (
        AuditEvent.objects.filter(pk__lte=head_id, tenant_id=version.tenant_id).filter(
            object_type=VERSION_OBJECT_TYPE, object_id__in=_version_object_ids(version)
        )
        | AuditEvent.objects.filter(
            pk__lte=head_id,
            tenant_id=version.tenant_id,
            object_type=ALIAS_OBJECT_TYPE,
            object_id__in=_alias_object_ids(alias_ids),
        )
        | AuditEvent.objects.filter(
            pk__lte=head_id,
            tenant_id=version.tenant_id,
            object_type=RUN_OBJECT_TYPE,
            object_id__in=run_event_ids(version),
        )
        | AuditEvent.objects.filter(
            pk__lte=head_id,
            tenant_id=version.tenant_id,
            object_type=PLAN_OBJECT_TYPE,
            object_id__in=plan_event_ids(version),
        )
    )
    unsigned = {
        "format": RECORD_FORMAT,
        "generated_at": timezone.now().isoformat(),
        "generated_by": generated_by,
        "version": _version_section(version),
        "validation": version.validation_report,
        "decisions": _decisions(version),
        "releases": releases,
        "served": _served(version),
        "evals": evals_section(version),
        "audit_events": [audit_event_dict(e) for e in events.order_by("id")],
        "anchor": anchor,
    }
    return sign_record(unsigned)


def version_evidence(
    *, access: Any, tenant: Any, adapter: str, number: int, request_id: str = ""
) -> dict[str, Any]:
    """The record of `adapter@number` in `tenant`, for the caller: not visible is 404, visible
    but not an owner, platform admin or auditor is 403 (adapters/access.py). Each export is
    audited, before the anchor is read, so the record carries its own export."""
    from adapters.selectors import adapter_get, version_get
    from core.audit import record_event

    found = adapter_get(access=access, tenant=tenant, name=adapter)
    version = version_get(adapter=found, number=number)
    access.require_evidence_reader(tenant)
    require_signing_key()  # before the export is audited: a refused export leaves no trace
    who = access.user.get_username()
    record_event(
        action="version.evidence_export",
        actor=access.user,
        tenant=tenant,
        obj=version,
        request_id=request_id,
    )
    return evidence_record(version=version, generated_by=who)
