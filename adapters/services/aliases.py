"""Aliases: tenant-scoped model names with weighted targets (canary)."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from adapters.models import AdapterVersion, Alias, AliasTarget, VersionStatus
from portal.audit import record_event
from portal.errors import ApplicationError, Conflict, clean_or_raise
from tenants.access import AccessContext
from tenants.models import Tenant

TOTAL_WEIGHT = 100


def _resolve_targets(
    tenant: Tenant, targets: list[dict[str, Any]]
) -> list[tuple[AdapterVersion, int]]:
    if not targets:
        raise ApplicationError("alias.no_targets", "An alias needs at least one target version.")
    seen: set[str] = set()
    resolved = []
    for target in targets:
        ref, weight = target["version"], int(target["weight"])
        if ref in seen:
            raise ApplicationError("alias.duplicate_target", f"'{ref}' is listed twice.")
        seen.add(ref)
        adapter_name, _, number = ref.partition("@")
        version = (
            AdapterVersion.objects.select_related("adapter")
            .filter(tenant=tenant, adapter__name=adapter_name, number=int(number or 0))
            .first()
        )
        if version is None:
            raise ApplicationError(
                "alias.unknown_version",
                f"Tenant '{tenant.slug}' has no version '{ref}'.",
                status=404,
            )
        if version.status != VersionStatus.ACTIVE:
            raise ApplicationError(
                "alias.version_not_active",
                f"'{ref}' is '{version.status}'; only active versions can be targets.",
            )
        resolved.append((version, weight))
    total = sum(weight for _, weight in resolved)
    if total != TOTAL_WEIGHT:
        raise ApplicationError(
            "alias.bad_weights",
            f"Target weights must add up to {TOTAL_WEIGHT}; they add up to {total}.",
        )
    base_models = {version.adapter.base_model_id for version, _ in resolved}
    if len(base_models) > 1:
        raise ApplicationError(
            "alias.mixed_base_models", "All targets of an alias must share one base model."
        )
    return resolved


def _describe(pairs: list[tuple[AdapterVersion, int]]) -> list[dict[str, Any]]:
    return [{"version": f"{v.adapter.name}@{v.number}", "weight": w} for v, w in pairs]


def alias_set(
    *,
    access: AccessContext,
    tenant: Tenant,
    name: str,
    targets: list[dict[str, Any]],
    request_id: str = "",
) -> Alias:
    """Create the alias or replace its targets atomically."""
    access.require_tenant(tenant, "manage_aliases")
    resolved = _resolve_targets(tenant, targets)
    with transaction.atomic():
        alias = Alias.objects.select_for_update().filter(tenant=tenant, name=name).first()
        before = None
        if alias is None:
            alias = Alias(tenant=tenant, name=name)
            clean_or_raise(alias, validate_unique=False, exclude=["tenant"])
            try:
                with transaction.atomic():
                    alias.save()
            except IntegrityError:
                raise Conflict(
                    "alias.exists", f"Alias '{name}' was created concurrently; retry."
                ) from None
        else:
            before = _describe(
                [(t.version, t.weight) for t in alias.targets.select_related("version__adapter")]
            )
            alias.targets.all().delete()
            alias.save(update_fields=["updated_at"])
        AliasTarget.objects.bulk_create(
            [AliasTarget(alias=alias, version=v, weight=w) for v, w in resolved]
        )
        record_event(
            action="alias.set",
            actor=access.user,
            tenant=tenant,
            obj=alias,
            object_id=f"{tenant.slug}/{name}",
            before=before and {"targets": before},
            after={"targets": _describe(resolved)},
            request_id=request_id,
        )
    return alias


def alias_delete(*, access: AccessContext, alias: Alias, request_id: str = "") -> None:
    access.require_tenant(alias.tenant, "manage_aliases")
    with transaction.atomic():
        before = _describe(
            [(t.version, t.weight) for t in alias.targets.select_related("version__adapter")]
        )
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
