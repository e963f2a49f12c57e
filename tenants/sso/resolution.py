"""What a set of claims is worth under a provider's mappings: tenant roles and platform roles."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tenants.models import TenantRole
from tenants.sso.models import SsoMapping

# Several mappings may name one tenant: the strongest role wins.
ROLE_STRENGTH = {TenantRole.VIEWER: 1, TenantRole.MAINTAINER: 2, TenantRole.OWNER: 3}

# Claims a person can set for themselves at some providers (a self-service profile, a sign-up
# form), and the claim by which a provider says it checked the value (OpenID Connect Core 5.1).
# A mapping on one of the first applies only when its flag is `true`: anyone could otherwise
# type the address (or number) a mapping names and be given its role.
VERIFIED_BY = {"email": "email_verified", "phone_number": "phone_number_verified"}
# Standard claims a person may set and no provider vouches for: a mapping on them could never
# apply, so none is made (services/mappings.py).
UNVERIFIABLE = frozenset(
    {
        "name",
        "given_name",
        "family_name",
        "middle_name",
        "nickname",
        "preferred_username",
        "profile",
        "picture",
        "website",
        "gender",
        "birthdate",
        "zoneinfo",
        "locale",
        "address",
    }
)


@dataclass(frozen=True)
class Resolution:
    tenant_roles: dict[int, str] = field(default_factory=dict)  # tenant id -> role
    tenant_slugs: dict[int, str] = field(default_factory=dict)
    platform_roles: frozenset[str] = frozenset()
    # "claim=value" of mappings whose value the claims carry but their provider did not verify.
    unverified: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.tenant_roles and not self.platform_roles

    def as_dict(self) -> dict[str, Any]:
        return {
            "memberships": [
                {"tenant": self.tenant_slugs[tid], "role": role}
                for tid, role in sorted(
                    self.tenant_roles.items(), key=lambda i: self.tenant_slugs[i[0]]
                )
            ],
            "platform_roles": sorted(self.platform_roles),
        }


def claim_values(claims: dict[str, Any], claim: str) -> set[str]:
    """A claim's values as strings: a list claim (groups) gives each item, a scalar itself."""
    value = claims.get(claim)
    if value is None:
        return set()
    if isinstance(value, list):
        return {str(item) for item in value if isinstance(item, str | int | bool)}
    if isinstance(value, str | int | bool):
        return {str(value)}
    return set()


def claim_verified(claims: dict[str, Any], claim: str) -> bool:
    """Whether a mapping on `claim` may trust its value in these claims."""
    if claim in UNVERIFIABLE:
        return False
    flag = VERIFIED_BY.get(claim)
    return flag is None or claims.get(flag) is True


def verified_email(claims: dict[str, Any]) -> str:
    """The e-mail address the provider vouches for, or ""."""
    email = claims.get("email")
    if isinstance(email, str) and claim_verified(claims, "email"):
        return email[:254]
    return ""


def resolve_claims(provider: str, claims: dict[str, Any]) -> Resolution:
    tenant_roles: dict[int, str] = {}
    slugs: dict[int, str] = {}
    platform_roles: set[str] = set()
    unverified: list[str] = []
    for mapping in SsoMapping.objects.filter(provider=provider).select_related("tenant"):
        if mapping.value not in claim_values(claims, mapping.claim):
            continue
        if not claim_verified(claims, mapping.claim):
            unverified.append(f"{mapping.claim}={mapping.value}")
            continue
        if mapping.platform_role:
            platform_roles.add(mapping.platform_role)
            continue
        tenant = mapping.tenant
        assert tenant is not None  # the table's check constraint
        current = tenant_roles.get(tenant.pk)
        if (
            current is None
            or ROLE_STRENGTH[TenantRole(mapping.role)] > ROLE_STRENGTH[TenantRole(current)]
        ):
            tenant_roles[tenant.pk] = mapping.role
            slugs[tenant.pk] = tenant.slug
    return Resolution(tenant_roles, slugs, frozenset(platform_roles), tuple(sorted(unverified)))
