"""What a set of claims is worth under a provider's mappings: tenant roles and platform roles."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tenants.models import TenantRole
from tenants.sso.models import SsoMapping

# Several mappings may name one tenant: the strongest role wins.
ROLE_STRENGTH = {TenantRole.VIEWER: 1, TenantRole.MAINTAINER: 2, TenantRole.OWNER: 3}


@dataclass(frozen=True)
class Resolution:
    tenant_roles: dict[int, str] = field(default_factory=dict)  # tenant id -> role
    tenant_slugs: dict[int, str] = field(default_factory=dict)
    platform_roles: frozenset[str] = frozenset()

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


def resolve_claims(provider: str, claims: dict[str, Any]) -> Resolution:
    tenant_roles: dict[int, str] = {}
    slugs: dict[int, str] = {}
    platform_roles: set[str] = set()
    for mapping in SsoMapping.objects.filter(provider=provider).select_related("tenant"):
        if mapping.value not in claim_values(claims, mapping.claim):
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
    return Resolution(tenant_roles, slugs, frozenset(platform_roles))
