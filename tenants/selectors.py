"""Reads about tenants and who may see them: members, per-adapter grants, tokens."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from tenants.access import AccessContext
from tenants.models import ApiToken, Membership, Tenant


def tenants_visible_to(*, user: Any) -> QuerySet[Tenant]:
    return AccessContext.for_user(user).visible_tenants()


def tokens_of(*, user: Any) -> QuerySet[ApiToken]:
    """A user's own API tokens, newest first; nobody lists another user's tokens here."""
    qs = ApiToken.objects.filter(user=user).select_related("tenant")
    return qs.order_by("-created_at", "-id")


def token_get(*, access: AccessContext, token_id: int) -> ApiToken:
    """One of the caller's own tokens (the /tokens/ page lists only those)."""
    from core.errors import NotFound

    token = tokens_of(user=access.user).filter(pk=token_id).first()
    if token is None:
        raise NotFound("token.not_found", "You have no such token.")
    return token


def whoami(*, access: AccessContext) -> dict[str, Any]:
    """The caller's user, platform roles, memberships and (signed in with a token) the token."""
    memberships = Membership.objects.filter(user=access.user).select_related("tenant")
    return {
        "username": access.user.username,
        "platform_roles": sorted(access.platform_roles),
        "memberships": [
            {"tenant": m.tenant.slug, "role": m.role} for m in memberships.order_by("tenant__slug")
        ],
        "token": access.token,
    }


def members_of(*, tenant: Tenant) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")
    )


@dataclass(frozen=True)
class Grant:
    adapter: str
    username: str
    perms: tuple[str, ...]


def grants_of(*, access: AccessContext, tenant: Tenant) -> list[Grant]:
    """Per-object grants on the adapters of `tenant` the caller can see, one row per user."""
    from adapters.models import AdapterUserObjectPermission

    rows = (
        AdapterUserObjectPermission.objects.filter(
            content_object__in=access.visible_adapters(tenant)
        )
        .order_by("content_object__name", "user__username", "permission__codename")
        .values_list("content_object__name", "user__username", "permission__codename")
    )
    perms: dict[tuple[str, str], list[str]] = defaultdict(list)
    for adapter, username, codename in rows:
        perms[(adapter, username)].append(codename)
    return [Grant(a, u, tuple(p)) for (a, u), p in perms.items()]


def tenant_tokens(*, access: AccessContext, tenant: Tenant) -> QuerySet[ApiToken]:
    """Tokens bound to `tenant`: all of them for those who manage its members, else one's own
    (the same reach as /api/v1/tenants/{t}/tokens/)."""
    qs = ApiToken.objects.filter(tenant=tenant).select_related("user", "tenant")
    if not access.sees_tokens_of_others(tenant):
        qs = qs.filter(user=access.user)
    return qs.order_by("-created_at", "-id")
