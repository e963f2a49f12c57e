"""Template tags the pages share: a tenant's tabs, each shown only to those its page admits."""

from __future__ import annotations

from typing import Any

from django import template

from adapters.access import AccessContext
from gateway.usage import may_read_usage
from tenants.notifications.selectors import recent_notices

register = template.Library()


@register.inclusion_tag("adapters/_tenant_tabs_inner.html", takes_context=True)
def tenant_tabs(context: Any, tenant: Any, current: str = "") -> dict[str, Any]:
    access = AccessContext.for_request(context["request"])
    member_view = access.tenant_can(tenant, "view")
    return {
        "tenant": tenant,
        "current": current,
        # A per-adapter grantee sees the adapters list (its grants) and nothing else of the tenant.
        "show_aliases": member_view,
        "show_members": member_view,
        "show_keys": member_view,
        "show_evals": member_view,
        "show_usage": may_read_usage(access, tenant),
        "show_cost": access.may_read_cost(tenant),
        "show_playground": access.tenant_can(tenant, "use_playground"),
        "show_notifications": member_view,
        "show_budgets": access.may_view_budgets(tenant),
        # What the tenant was told lately (a budget's threshold...), on every one of its pages.
        "notices": recent_notices(tenant=tenant, user=access.user) if member_view else [],
        "request": context["request"],
    }
