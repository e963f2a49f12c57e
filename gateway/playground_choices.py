"""What a signed-in user may chat with in a tenant's playground, read fresh from the database on
every prompt (a revoked membership or grant counts at once); the rule is adapters/access.py's
`playground_may_use`. Builds the gateway's own Route/Target, so the request path is the API's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import OuterRef, Subquery

from adapters.access import AccessContext
from adapters.models import AdapterVersion, BaseModel, VersionStatus
from core.errors import NotFound, PermissionDenied
from gateway.routes import Route, RouteTable, Target
from gateway.routes import _target as target_of  # the table's own builder: same pool, rank, caps
from tenants.access_port import Access
from tenants.models import Membership, Tenant

BASE_PREFIX = "base:"
PLAYABLE_STATUSES = (VersionStatus.ACTIVE, VersionStatus.STAGED)


@dataclass(frozen=True)
class Choice:
    """One entry of the playground's picker: `key` is what the socket sends back."""

    key: str
    label: str
    status: str  # "active", "staged" or "base"


@dataclass(frozen=True)
class Resolved:
    """A choice the user may use now, as the gateway's request path takes it."""

    key: str
    tenant_id: int
    route: Route
    target: Target | None  # None for the base model


def _base_models(tenant: Tenant) -> list[BaseModel]:
    return list(BaseModel.objects.filter(adapters__tenant=tenant).distinct().order_by("name"))


def playground_choices(*, access: Access, tenant: Tenant) -> list[Choice]:
    """Versions (newest first per adapter) and base models this user may chat with here."""
    versions = (
        AdapterVersion.objects.filter(tenant=tenant, status__in=PLAYABLE_STATUSES)
        .select_related("adapter__tenant", "tenant")
        .order_by("adapter__name", "-number")
    )
    out = [
        Choice(f"{v.adapter.name}@{v.number}", f"{v.adapter.name}@{v.number}", v.status)
        for v in versions
        if access.playground_may_use(tenant, v)
    ]
    if access.playground_may_use(tenant):
        out += [
            Choice(BASE_PREFIX + b.name, f"{b.name} (base model)", "base")
            for b in _base_models(tenant)
        ]
    return out


def _fresh_access(user: Any, tenant_slug: str) -> tuple[Access, Tenant]:
    """A new AccessContext (no stale memberships) and the tenant, if still in reach (else 404)."""
    if not get_user_model().objects.filter(pk=user.pk, is_active=True).exists():
        raise NotFound("tenant.not_found", f"No tenant '{tenant_slug}' is visible to you.")
    access = AccessContext.for_user(user)
    return access, access.get_tenant(tenant_slug)


def _denied(tenant: Tenant) -> PermissionDenied:
    return PermissionDenied(
        "playground.denied",
        f"Your role in tenant '{tenant.slug}' gives you nothing to try in the playground; "
        "maintainers and owners may use it.",
    )


def playground_offer(*, user: Any, tenant_slug: str) -> tuple[Tenant, list[Choice]]:
    """The tenant and what this user may chat with there now (the page's picker, and the
    socket's first message): 404 when the tenant is out of reach, 403 when it is visible but
    offers this user nothing to chat with."""
    access, tenant = _fresh_access(user, tenant_slug)
    choices = playground_choices(access=access, tenant=tenant)
    if not choices:
        raise _denied(tenant)
    return tenant, choices


def resolve_choice(*, user: Any, tenant_slug: str, key: object) -> Resolved:
    """One picker key, checked against what the user may use right now. A user who lost the
    tenant gets tenant.not_found and one who lost the playground there playground.denied (the
    socket closes on both); anything else out of reach is playground.not_found."""
    resolved = _member_version(user, tenant_slug, key)
    if resolved is not None:
        return resolved
    access, tenant = _fresh_access(user, tenant_slug)
    resolved = _resolve(access, tenant, key)
    if resolved is not None:
        return resolved
    if not playground_choices(access=access, tenant=tenant):
        raise _denied(tenant)
    shown = key[:80] if isinstance(key, str) else ""
    raise NotFound(
        "playground.not_found",
        f"'{shown}' is not a version or base model you may use in {tenant.slug}'s playground.",
    )


def _member_version(user: Any, tenant_slug: str, key: object) -> Resolved | None:
    """The common case in one query, on every prompt: a member asking for one of the tenant's
    versions. The row carries the user's role there as of now (none if the membership or the
    user is gone), and the decision is still playground_may_use, given that role as
    gateway/routes.py gives it a token's. Anything else takes the full path below."""
    if not isinstance(key, str):
        return None
    adapter, sep, number = key.partition("@")
    if not sep or not number.isdigit():
        return None
    role = Membership.objects.filter(
        user_id=user.pk, user__is_active=True, tenant_id=OuterRef("tenant_id")
    ).values("role")[:1]
    version = (
        AdapterVersion.objects.filter(
            tenant__slug=tenant_slug, adapter__name=adapter, number=int(number)
        )
        .select_related("adapter__tenant", "tenant")
        .annotate(member_role=Subquery(role))
        .first()
    )
    if version is None or version.member_role is None:
        return None
    access = AccessContext.with_memberships(user, {version.tenant_id: version.member_role})
    if not access.playground_may_use(version.tenant, version):
        return None
    target = target_of(version)
    return Resolved(key, version.tenant_id, Route(target.label, (target,)), target)


def table_choice(table: RouteTable, *, user: Any, tenant_slug: str, key: object) -> Resolved | None:
    """The common case with no database round trip: a member who may use the playground asking
    for one of the tenant's active versions, read from the gateway's tables. They hold active
    users' roles and active versions, and are rebuilt on every change to memberships, users,
    versions and tokens (gateway.invalidation), as the API's tokens are. None: anything else
    (staged versions, base models, grantees, refusals), which resolve_choice answers from the
    database. The decision is still playground_may_use's."""
    if not isinstance(key, str) or "@" not in key or key.startswith(BASE_PREFIX):
        return None
    tenant_id = table.tenant_ids.get(tenant_slug)
    if tenant_id is None:
        return None
    role = table.members.get(user.pk, {}).get(tenant_id)
    route = table.routes.get(tenant_id, {}).get(key)
    # role_can first: playground_may_use would otherwise ask the database for platform roles.
    if role is None or route is None or not AccessContext.role_can(role, "use_playground"):
        return None
    if len(route.targets) != 1 or route.targets[0].label != key:
        return None  # an alias named like a version: not what the picker offers
    access = AccessContext.with_memberships(user, {tenant_id: role})
    tenant = Tenant(id=tenant_id, slug=tenant_slug)
    version = AdapterVersion(tenant_id=tenant_id, status=VersionStatus.ACTIVE)  # in the table
    if not access.playground_may_use(tenant, version):
        return None
    return Resolved(key, tenant_id, route, route.targets[0])


def _resolve(access: Access, tenant: Tenant, key: object) -> Resolved | None:
    if not isinstance(key, str) or not key:
        return None
    if key.startswith(BASE_PREFIX):
        name = key[len(BASE_PREFIX) :]
        base = next((b for b in _base_models(tenant) if b.name == name), None)
        if base is None or not access.playground_may_use(tenant):
            return None
        return Resolved(key, tenant.id, Route(base.name, base_model_id=base.pk), None)
    adapter, sep, number = key.partition("@")
    if not sep or not number.isdigit():
        return None
    version = (
        AdapterVersion.objects.filter(tenant=tenant, adapter__name=adapter, number=int(number))
        .select_related("adapter__tenant", "tenant")
        .first()
    )
    if version is None or not access.playground_may_use(tenant, version):
        return None
    target = target_of(version)
    return Resolved(key, tenant.id, Route(target.label, (target,)), target)
