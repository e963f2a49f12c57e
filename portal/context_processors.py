from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from adapters.access import AccessContext


def navigation(request: HttpRequest) -> dict[str, Any]:
    """Which links the navigation shows; the same AccessContext the pages themselves ask."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    access = AccessContext.for_request(request)
    roles = list(user.memberships.order_by("tenant__slug").values_list("tenant__slug", "role"))
    return {
        "nav_is_reviewer": access.is_reviewer,
        "nav_is_platform_admin": access.is_platform_admin,
        "nav_is_operator": access.sees_engines,
        "nav_tenants": [slug for slug, _ in roles],
        "nav_can_audit": access.may_read_audit(),
        # Auditors reach the fleet's cost from here; platform admins also from the platform tabs.
        "nav_sees_cost": access.is_auditor and access.may_read_cost(None),
    }
