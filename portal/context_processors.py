from __future__ import annotations

from typing import Any

from django.http import HttpRequest


def navigation(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    groups = set(user.groups.values_list("name", flat=True))
    return {
        "nav_is_reviewer": "reviewer" in groups or user.is_superuser,
        "nav_is_operator": "operator" in groups or "platform-admin" in groups or user.is_superuser,
        **_page_links(user, is_admin="platform-admin" in groups or user.is_superuser),
    }


def _page_links(user: Any, *, is_admin: bool) -> dict[str, Any]:
    """Tenant pages of the user's memberships, and the audit log for admins and tenant owners."""
    roles = list(user.memberships.order_by("tenant__slug").values_list("tenant__slug", "role"))
    return {
        "nav_tenants": [slug for slug, _ in roles],
        "nav_can_audit": is_admin or any(role == "owner" for _, role in roles),
    }
