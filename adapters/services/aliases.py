"""Aliases: tenant-scoped model names with weighted targets (canary), and the revisions that keep
every state of an alias's targets so a release can be rolled back (adapters/services/releases.py).
"""

from __future__ import annotations

import re
from typing import Any

from django.db import IntegrityError, transaction

from adapters.models import (
    AdapterVersion,
    Alias,
    AliasRevision,
    AliasRevisionAction,
    AliasTarget,
    VersionStatus,
)
from core.audit import record_event
from core.errors import ApplicationError, Conflict, clean_or_raise
from tenants.access_port import Access
from tenants.models import Tenant

TOTAL_WEIGHT = 100
# The one shape of an alias target, `adapter@N`: the API's serializers and the pages use it too.
VERSION_REF_PATTERN = r"^[a-z0-9-]{1,40}@[0-9]{1,9}$"
_VERSION_REF = re.compile(VERSION_REF_PATTERN)
GUARD_FIELDS = ("auto_rollback", "max_error_rate", "max_ttft_ms", "window_minutes", "min_requests")

# (version, weight, max_concurrent): one target as the services handle it.
Resolved = tuple[AdapterVersion, int, int | None]


def parse_version_ref(ref: object) -> tuple[str, int]:
    """`adapter@N` -> (adapter name, N), or alias.bad_target."""
    if not isinstance(ref, str) or not _VERSION_REF.match(ref):
        raise ApplicationError("alias.bad_target", f"'{ref}' is not a version like 'adapter@3'.")
    name, _, number = ref.partition("@")
    return name, int(number)


def resolve_targets(tenant: Tenant, targets: list[dict[str, Any]]) -> list[Resolved]:
    if not targets:
        raise ApplicationError("alias.no_targets", "An alias needs at least one target version.")
    seen: set[str] = set()
    resolved: list[Resolved] = []
    for target in targets:
        ref, weight = target["version"], int(target["weight"])
        cap = target.get("max_concurrent")
        if ref in seen:
            raise ApplicationError("alias.duplicate_target", f"'{ref}' is listed twice.")
        seen.add(ref)
        if cap is not None and int(cap) < 1:
            raise ApplicationError(
                "alias.bad_max_concurrent", f"max_concurrent of '{ref}' must be at least 1."
            )
        adapter_name, number = parse_version_ref(ref)
        version = (
            AdapterVersion.objects.select_related("adapter")
            .filter(tenant=tenant, adapter__name=adapter_name, number=number)
            .first()
        )
        if version is None:
            raise ApplicationError(
                "alias.unknown_version",
                f"Tenant '{tenant.slug}' has no version '{ref}'.",
                status=404,
            )
        _require_active(version, ref)
        resolved.append((version, weight, int(cap) if cap is not None else None))
    total = sum(weight for _, weight, _ in resolved)
    if total != TOTAL_WEIGHT:
        raise ApplicationError(
            "alias.bad_weights",
            f"Target weights must add up to {TOTAL_WEIGHT}; they add up to {total}.",
        )
    base_models = {version.adapter.base_model_id for version, _, _ in resolved}
    if len(base_models) > 1:
        raise ApplicationError(
            "alias.mixed_base_models", "All targets of an alias must share one base model."
        )
    return resolved


def _require_active(version: AdapterVersion, ref: str) -> None:
    if version.status != VersionStatus.ACTIVE:
        raise ApplicationError(
            "alias.version_not_active",
            f"'{ref}' is '{version.status}'; only active versions can be targets.",
        )


def describe(resolved: list[Resolved]) -> list[dict[str, Any]]:
    """Targets as revisions, audit events and the API show them (version ids kept for rollback)."""
    return [
        {
            "version": f"{v.adapter.name}@{v.number}",
            "version_id": v.pk,
            "weight": w,
            "max_concurrent": cap,
        }
        for v, w, cap in resolved
    ]


def current_targets(alias: Alias) -> list[Resolved]:
    return [
        (t.version, t.weight, t.max_concurrent)
        for t in alias.targets.select_related("version__adapter").order_by("-weight", "id")
    ]


def same_targets(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    def key(targets: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((t["version_id"], t["weight"], t["max_concurrent"]) for t in targets)

    return key(a) == key(b)


def current_revision(alias: Alias) -> AliasRevision | None:
    return alias.revisions.order_by("-number").first()


def locked_alias(alias: Alias) -> Alias:
    """The alias row locked for the rest of the transaction: one change at a time."""
    return Alias.objects.select_for_update().select_related("tenant").get(pk=alias.pk)


def revision_head(alias: Alias) -> AliasRevision | None:
    """The current revision of a locked alias; an alias older than revisions gets its baseline."""
    head = current_revision(alias)
    if head is None and alias.targets.exists():
        head = AliasRevision.objects.create(
            alias=alias,
            number=1,
            targets=describe(current_targets(alias)),
            action=AliasRevisionAction.SET,
            actor_label="system",
            reason="targets as they were before revisions were kept",
        )
    return head


def apply_targets(
    *,
    alias: Alias,
    targets: list[Resolved],
    head: AliasRevision | None,
    parent: AliasRevision | None,
    action: str,
    actor: Any,
    reason: str = "",
    evidence: dict[str, Any] | None = None,
) -> AliasRevision:
    """Replace a locked alias's targets and keep the new state as its next revision."""
    alias.targets.all().delete()
    AliasTarget.objects.bulk_create(
        [AliasTarget(alias=alias, version=v, weight=w, max_concurrent=c) for v, w, c in targets]
    )
    alias.save(update_fields=["updated_at"])  # also tells the gateway replicas to re-read
    user = actor if getattr(actor, "is_authenticated", False) else None
    return AliasRevision.objects.create(
        alias=alias,
        number=(head.number + 1) if head else 1,
        targets=describe(targets),
        parent=parent,
        action=action,
        actor=user,
        actor_label=user.get_username() if user else str(actor or "system"),
        reason=reason,
        evidence=evidence or {},
    )


def _apply_guard(alias: Alias, guard: dict[str, Any] | None) -> dict[str, Any]:
    """Set the automatic-rollback settings given (others keep their value); returns them all."""
    for name, value in (guard or {}).items():
        if name not in GUARD_FIELDS:
            raise ApplicationError("alias.unknown_setting", f"Aliases have no setting '{name}'.")
        setattr(alias, name, value)
    clean_or_raise(alias, validate_unique=False, exclude=["tenant", "name"])
    return {name: getattr(alias, name) for name in GUARD_FIELDS}


def alias_set(
    *,
    access: Access,
    tenant: Tenant,
    name: str,
    targets: list[dict[str, Any]],
    guard: dict[str, Any] | None = None,
    reason: str = "",
    request_id: str = "",
) -> Alias:
    """Create the alias or replace its targets (and its guard settings, if given) atomically.

    A change of targets becomes the alias's next revision; setting the same targets again
    keeps the revision (only the audit event records the call).
    """
    access.require_tenant(tenant, "manage_aliases")
    resolved = resolve_targets(tenant, targets)
    with transaction.atomic():
        alias = Alias.objects.select_for_update().filter(tenant=tenant, name=name).first()
        before = None
        if alias is None:
            alias = Alias(tenant=tenant, name=name)
            clean_or_raise(alias, validate_unique=False, exclude=["tenant"])
            settings_after = _apply_guard(alias, guard)
            try:
                with transaction.atomic():
                    alias.save()
            except IntegrityError:
                raise Conflict(
                    "alias.exists", f"Alias '{name}' was created concurrently; retry."
                ) from None
            head = None
        else:
            settings_before = {n: getattr(alias, n) for n in GUARD_FIELDS}
            settings_after = _apply_guard(alias, guard)
            head = revision_head(alias)
            before = {"targets": describe(current_targets(alias)), **settings_before}
            if guard:
                alias.save(update_fields=[*guard, "updated_at"])
        new = describe(resolved)
        revision = head
        if head is None or not same_targets(head.targets, new):
            revision = apply_targets(
                alias=alias,
                targets=resolved,
                head=head,
                parent=head,
                action=AliasRevisionAction.SET,
                actor=access.user,
                reason=reason,
            )
        record_event(
            action="alias.set",
            actor=access.user,
            tenant=tenant,
            obj=alias,
            object_id=f"{tenant.slug}/{name}",
            before=before,
            after={
                "targets": new,
                **settings_after,
                "revision": revision.number if revision else None,
                "reason": reason,
            },
            request_id=request_id,
        )
    return alias


def alias_delete(*, access: Access, alias: Alias, request_id: str = "") -> None:
    access.require_tenant(alias.tenant, "manage_aliases")
    with transaction.atomic():
        before = describe(current_targets(alias))
        record_event(
            action="alias.delete",
            actor=access.user,
            tenant=alias.tenant,
            obj=alias,
            object_id=f"{alias.tenant.slug}/{alias.name}",
            before={"targets": before},
            request_id=request_id,
        )
        alias.delete()
