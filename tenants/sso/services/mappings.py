"""Platform admins keep each provider's mappings from claim values to roles; every change audited.
The dry run shows what a set of claims would give, and what would change for the person."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from core.audit import record_event
from core.errors import ApplicationError, Conflict, NotFound
from tenants.models import PlatformRole, Tenant, TenantRole
from tenants.sso.models import SsoIdentity, SsoMapping
from tenants.sso.providers import provider_named
from tenants.sso.resolution import UNVERIFIABLE, resolve_claims
from tenants.sso.services.sync import plan_sync

MAX_CLAIMS_BYTES = 64 * 1024


def mapping_describe(mapping: SsoMapping) -> dict[str, Any]:
    target: dict[str, Any] = (
        {"platform_role": mapping.platform_role}
        if mapping.platform_role
        else {"tenant": mapping.tenant.slug if mapping.tenant else None, "role": mapping.role}
    )
    return {"id": mapping.pk, "claim": mapping.claim, "value": mapping.value, **target}


def mapping_create(
    *,
    access: Any,
    provider: str,
    claim: str,
    value: str,
    tenant: str = "",
    role: str = "",
    platform_role: str = "",
    request_id: str = "",
) -> SsoMapping:
    access.require_platform_role("is_platform_admin")
    provider_named(provider)
    claim, value = claim.strip(), value.strip()
    if not claim or not value or len(claim) > 100 or len(value) > 255:
        raise ApplicationError(
            "sso.bad_mapping", "Give a claim (up to 100 characters) and a value (up to 255)."
        )
    if claim in UNVERIFIABLE:
        raise ApplicationError(
            "sso.unverifiable_claim",
            f"A person can set '{claim}' for themselves at some providers, and no provider says "
            "it checked it: a mapping on it would give its role to whoever types the value. "
            "Map a group (`groups`), or `email` (which applies only when the provider marks it "
            "verified).",
        )
    if bool(tenant) == bool(platform_role) or bool(tenant) != bool(role):
        raise ApplicationError(
            "sso.bad_mapping", "Map to a tenant and a role, or to a platform role (not both)."
        )
    if role and role not in TenantRole.values:
        raise ApplicationError(
            "sso.bad_mapping", f"role must be one of {', '.join(TenantRole.values)}."
        )
    if platform_role and platform_role not in PlatformRole.values:
        raise ApplicationError(
            "sso.bad_mapping", f"platform_role must be one of {', '.join(PlatformRole.values)}."
        )
    found = Tenant.objects.filter(slug=tenant).first() if tenant else None
    if tenant and found is None:
        raise NotFound("tenant.not_found", f"No tenant '{tenant}'.")
    mapping = SsoMapping(
        provider=provider,
        claim=claim,
        value=value,
        tenant=found,
        role=role,
        platform_role=platform_role,
        created_by=access.user,
    )
    try:
        with transaction.atomic():
            mapping.save()
            record_event(
                action="sso.mapping.create",
                actor=access.user,
                tenant=found,
                obj=mapping,
                after={"provider": provider, **mapping_describe(mapping)},
                request_id=request_id,
            )
    except IntegrityError:
        raise Conflict("sso.mapping_exists", "This mapping exists already.") from None
    return mapping


def mapping_delete(*, access: Any, mapping: SsoMapping, request_id: str = "") -> None:
    access.require_platform_role("is_platform_admin")
    with transaction.atomic():
        record_event(
            action="sso.mapping.delete",
            actor=access.user,
            tenant=mapping.tenant,
            obj=mapping,
            before={"provider": mapping.provider, **mapping_describe(mapping)},
            request_id=request_id,
        )
        mapping.delete()


def mapping_dry_run(
    *, access: Any, provider: str, claims: Any, request_id: str = ""
) -> dict[str, Any]:
    """What `claims` would give at `provider`, and, for a known subject (`sub`), what would
    change for that person at their next sign-in. Changes nothing; audited as a look at who
    would get what (`sso.dry_run`, with the subject and the outcome, not the claims)."""
    access.require_platform_role("is_platform_admin")
    found = provider_named(provider)
    if not isinstance(claims, dict) or len(repr(claims)) > MAX_CLAIMS_BYTES:
        raise ApplicationError("sso.bad_claims", "Give `claims` as a JSON object (up to 64 KiB).")
    resolution = resolve_claims(found.name, claims)
    identity = (
        SsoIdentity.objects.select_related("user")
        .filter(issuer=found.issuer, subject=str(claims.get("sub", "")))
        .first()
        if claims.get("sub") is not None
        else None
    )
    user = identity.user if identity is not None else None
    changes = plan_sync(user=user, identity=identity, resolution=resolution)
    result = {
        **resolution.as_dict(),
        "maps_nowhere": resolution.is_empty,
        # Mappings the claims would meet but their provider did not verify: not applied.
        "unverified": list(resolution.unverified),
        "user": user.get_username() if user is not None else None,
        "changes": [change.as_dict() for change in changes],
    }
    record_event(
        action="sso.dry_run",
        actor=access.user,
        object_type="sso.provider",
        object_id=found.name,
        after={"subject": str(claims.get("sub", ""))[:255], **resolution.as_dict()},
        request_id=request_id,
    )
    return result
