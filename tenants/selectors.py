"""Reads about tenants and who may see them: members and tokens (per-adapter grants are the
registry's: adapters.selectors.grants_of)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from tenants.access_port import Access
from tenants.models import ApiToken, Membership, Tenant


def tokens_of(*, user: Any) -> QuerySet[ApiToken]:
    """A user's own API tokens, newest first; nobody lists another user's tokens here."""
    qs = ApiToken.objects.filter(user=user).select_related("tenant")
    return qs.order_by("-created_at", "-id")


def token_get(*, access: Access, token_id: int) -> ApiToken:
    """One of the caller's own tokens (the /tokens/ page lists only those)."""
    from core.errors import NotFound

    token = tokens_of(user=access.user).filter(pk=token_id).first()
    if token is None:
        raise NotFound("token.not_found", "You have no such token.")
    return token


def whoami(*, access: Access) -> dict[str, Any]:
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


def tenant_tokens(*, access: Access, tenant: Tenant) -> QuerySet[ApiToken]:
    """Tokens bound to `tenant`: all of them for those who manage its members, else one's own
    (the same reach as /api/v1/tenants/{t}/tokens/)."""
    qs = ApiToken.objects.filter(tenant=tenant).select_related("user", "tenant")
    if not access.sees_tokens_of_others(tenant):
        qs = qs.filter(user=access.user)
    return qs.order_by("-created_at", "-id")
