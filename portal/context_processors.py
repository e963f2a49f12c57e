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
    }
