"""Who may see and do what: one place for tenant scoping, roles, object grants and token limits.

Every view, API endpoint and consumer asks an AccessContext; none of them filters by tenant on
its own. Objects outside the caller's reach are not found (404); objects in reach but beyond the
caller's role are forbidden (403).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db.models import Q, QuerySet
from guardian.shortcuts import get_objects_for_user

from portal.errors import NotFound, PermissionDenied
from tenants.models import ApiToken, Membership, PlatformRole, Tenant, TenantRole, TokenScope

# What each tenant role may do with the tenant's adapters (guardian codenames on Adapter).
ROLE_ADAPTER_PERMS: dict[str, frozenset[str]] = {
    TenantRole.OWNER: frozenset(
        {
            "view_adapter",
            "add_adapter",
            "change_adapter",
            "delete_adapter",
            "upload_version",
            "release_version",
        }
    ),
    TenantRole.MAINTAINER: frozenset(
        {"view_adapter", "add_adapter", "change_adapter", "upload_version"}
    ),
    TenantRole.VIEWER: frozenset({"view_adapter"}),
}

# Tenant-level capabilities beyond adapters.
ROLE_TENANT_CAPS: dict[str, frozenset[str]] = {
    TenantRole.OWNER: frozenset(
        {
            "view",
            "manage_members",
            "manage_aliases",
            "create_adapter",
            "release",
            "use_playground",
            "manage_keys",
            "infer",
        }
    ),
    TenantRole.MAINTAINER: frozenset(
        {"view", "manage_aliases", "create_adapter", "use_playground", "infer"}
    ),
    TenantRole.VIEWER: frozenset({"view"}),
}

# A scope a token needs for each kind of action; `write` and `approve` include reading.
SCOPE_IMPLIES: dict[str, frozenset[str]] = {
    TokenScope.READ: frozenset({TokenScope.READ}),
    TokenScope.WRITE: frozenset({TokenScope.WRITE, TokenScope.READ}),
    TokenScope.APPROVE: frozenset({TokenScope.APPROVE, TokenScope.READ}),
    TokenScope.ADMIN: frozenset({TokenScope.ADMIN, TokenScope.READ, TokenScope.WRITE}),
    TokenScope.INFERENCE: frozenset({TokenScope.INFERENCE}),
}


@dataclass
class AccessContext:
    user: Any
    token: ApiToken | None = None
    _role_cache: dict[int, str | None] = field(default_factory=dict, repr=False)

    @classmethod
    def for_user(cls, user: Any, token: ApiToken | None = None) -> AccessContext:
        return cls(user=user, token=token)

    @classmethod
    def for_request(cls, request: Any) -> AccessContext:
        cached = getattr(request, "_access_context", None)
        if cached is None:
            auth = getattr(request, "auth", None)
            cached = cls(user=request.user, token=auth if isinstance(auth, ApiToken) else None)
            request._access_context = cached
        return cached

    # --- identity ---
    @property
    def is_authenticated(self) -> bool:
        return bool(getattr(self.user, "is_authenticated", False))

    @cached_property
    def platform_roles(self) -> frozenset[str]:
        if not self.is_authenticated:
            return frozenset()
        names = set(self.user.groups.values_list("name", flat=True)) & set(PlatformRole.values)
        if self.user.is_superuser:
            names.add(PlatformRole.PLATFORM_ADMIN)
        return frozenset(names)

    @property
    def is_platform_admin(self) -> bool:
        return PlatformRole.PLATFORM_ADMIN in self.platform_roles

    @property
    def is_reviewer(self) -> bool:
        return PlatformRole.REVIEWER in self.platform_roles

    @property
    def is_operator(self) -> bool:
        return bool({PlatformRole.OPERATOR, PlatformRole.PLATFORM_ADMIN} & self.platform_roles)

    @cached_property
    def memberships(self) -> dict[int, str]:
        if not self.is_authenticated:
            return {}
        return dict(Membership.objects.filter(user=self.user).values_list("tenant_id", "role"))

    # --- tokens ---
    def has_scope(self, scope: str) -> bool:
        """Session logins carry every scope their user has; tokens only what they were given."""
        if self.token is None:
            return scope != TokenScope.INFERENCE or self.is_authenticated
        granted: set[str] = set()
        for given in self.token.scopes:
            granted |= SCOPE_IMPLIES.get(given, frozenset())
        return scope in granted

    def require_scope(self, scope: str) -> None:
        if not self.has_scope(scope):
            raise PermissionDenied(
                "token.missing_scope",
                f"This token lacks the '{scope}' scope needed for this request.",
            )

    @property
    def bound_tenant_id(self) -> int | None:
        return self.token.tenant_id if self.token is not None else None

    def _in_token_reach(self, tenant_id: int) -> bool:
        return self.bound_tenant_id is None or self.bound_tenant_id == tenant_id

    # --- tenants ---
    def sees_all_tenants(self) -> bool:
        return self.is_platform_admin or self.is_reviewer

    def visible_tenants(self) -> QuerySet[Tenant]:
        if not self.is_authenticated:
            return Tenant.objects.none()
        if self.sees_all_tenants():
            qs = Tenant.objects.all()
        else:
            granted = self._granted_adapter_tenant_ids()
            qs = Tenant.objects.filter(Q(id__in=list(self.memberships)) | Q(id__in=granted))
        if self.bound_tenant_id is not None:
            qs = qs.filter(id=self.bound_tenant_id)
        return qs

    def _granted_adapter_tenant_ids(self) -> QuerySet:
        from adapters.models import AdapterUserObjectPermission

        return AdapterUserObjectPermission.objects.filter(
            user=self.user, permission__codename="view_adapter"
        ).values("content_object__tenant_id")

    def get_tenant(self, slug: str) -> Tenant:
        tenant = self.visible_tenants().filter(slug=slug).first()
        if tenant is None:
            raise NotFound("tenant.not_found", f"No tenant '{slug}' is visible to you.")
        return tenant

    def tenant_role(self, tenant: Tenant) -> str | None:
        if not self._in_token_reach(tenant.id):
            return None
        return self.memberships.get(tenant.id)

    def tenant_can(self, tenant: Tenant, capability: str) -> bool:
        if not self._in_token_reach(tenant.id):
            return False
        role = self.tenant_role(tenant)
        if role is not None and capability in ROLE_TENANT_CAPS[role]:
            return True
        if capability == "view" and self.sees_all_tenants():
            return True
        # Platform admins run the platform, they do not act inside tenants (least privilege),
        # except for membership management when bootstrapping a tenant.
        return capability == "manage_members" and self.is_platform_admin

    def require_tenant(self, tenant: Tenant, capability: str) -> None:
        if not self.tenant_can(tenant, capability):
            raise PermissionDenied(
                "permission.denied",
                f"Your role in tenant '{tenant.slug}' does not allow '{capability}'.",
            )

    # --- adapters ---
    def visible_adapters(self, tenant: Tenant) -> QuerySet:
        from adapters.models import Adapter

        qs = Adapter.objects.filter(tenant=tenant)
        if not self._in_token_reach(tenant.id) or not self.is_authenticated:
            return qs.none()
        if self.tenant_role(tenant) is not None or self.sees_all_tenants():
            return qs
        # Per-object grants only; never a model-wide permission (it would cross tenants).
        return get_objects_for_user(
            self.user,
            "adapters.view_adapter",
            klass=qs,
            accept_global_perms=False,
            with_superuser=False,
        )

    def granted_adapters(self, *, outside_tenants: list[int]) -> QuerySet:
        """Adapters seen through per-object grants only, in tenants the caller is not a member of."""
        from adapters.models import Adapter

        qs = Adapter.objects.exclude(tenant_id__in=outside_tenants)
        if self.bound_tenant_id is not None:
            qs = qs.filter(tenant_id=self.bound_tenant_id)
        if not self.is_authenticated:
            return qs.none()
        return get_objects_for_user(
            self.user,
            "adapters.view_adapter",
            klass=qs,
            accept_global_perms=False,
            with_superuser=False,
        )

    def adapter_can(self, adapter: Any, perm: str) -> bool:
        if not self._in_token_reach(adapter.tenant_id):
            return False
        role = self.tenant_role(adapter.tenant)
        if role is not None and perm in ROLE_ADAPTER_PERMS[role]:
            return True
        if perm == "view_adapter" and self.sees_all_tenants():
            return True
        return self._object_perms(adapter).__contains__(perm)

    def _object_perms(self, adapter: Any) -> frozenset[str]:
        from guardian.core import ObjectPermissionChecker

        checker = getattr(self, "_checker", None)
        if checker is None:
            checker = ObjectPermissionChecker(self.user)
            self._checker = checker
        return frozenset(checker.get_perms(adapter))

    def require_adapter(self, adapter: Any, perm: str) -> None:
        if not self.adapter_can(adapter, perm):
            raise PermissionDenied(
                "permission.denied", f"You may not '{perm}' on adapter '{adapter.name}'."
            )

    # --- playground ---
    def playground_may_use(self, tenant: Tenant, version: Any | None = None) -> bool:
        """Whether this user may chat with `version` (None: the tenant's base models) in the
        playground. Members with the playground (maintainers, owners) may use the tenant's active
        versions, its base models, and staged versions, to try them before release; a grantee who
        may upload to one adapter may use that adapter's active versions only. Nobody else, and
        the gateway's API never serves a staged version at all."""
        from adapters.models import VersionStatus

        if version is not None and version.tenant_id != tenant.id:
            return False
        if self.tenant_can(tenant, "use_playground"):
            return version is None or version.status in (
                VersionStatus.ACTIVE,
                VersionStatus.STAGED,
            )
        return (
            version is not None
            and version.status == VersionStatus.ACTIVE
            and self.adapter_can(version.adapter, "upload_version")
        )
