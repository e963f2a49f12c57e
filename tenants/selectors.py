"""Reads about tenants and who may see them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from tenants.models import Tenant


def tenants_visible_to(*, user: Any) -> QuerySet[Tenant]:
    from tenants.access import AccessContext

    return AccessContext.for_user(user).visible_tenants()


def tokens_of(*, user: Any) -> QuerySet:
    """A user's own API tokens, newest first; nobody lists another user's tokens here."""
    from tenants.models import ApiToken

    qs = ApiToken.objects.filter(user=user).select_related("tenant")
    return qs.order_by("-created_at", "-id")


def token_get(*, user: Any, token_id: int) -> Any:
    from portal.errors import NotFound

    token = tokens_of(user=user).filter(pk=token_id).first()
    if token is None:
        raise NotFound("token.not_found", "You have no such token.")
    return token
