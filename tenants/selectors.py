"""Reads about tenants and who may see them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from tenants.models import Tenant


def tenants_visible_to(*, user: Any) -> QuerySet[Tenant]:
    from tenants.access import AccessContext

    return AccessContext.for_user(user).visible_tenants()
