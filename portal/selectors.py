"""Reads for the web shell."""

from __future__ import annotations

from typing import Any

from workers.models import Engine


def dashboard_context(*, user: Any) -> dict[str, Any]:
    from tenants.selectors import tenants_visible_to

    return {
        "engines": Engine.objects.select_related("base_model").all(),
        "tenants": tenants_visible_to(user=user),
    }
