"""Reads for the web shell."""

from __future__ import annotations

from typing import Any


def dashboard_context(*, user: Any) -> dict[str, Any]:
    """Engines only through dashboard_fleet (those who see engines); a tenant's plan only where
    the caller sees its details (a grant alone shows the name)."""
    from adapters.access import AccessContext
    from workers.page_selectors.engines import dashboard_fleet

    access = AccessContext.for_user(user)
    return {
        "tenants": access.visible_tenants().order_by("slug"),
        "detailed_tenant_ids": set(access.tenants_with_details().values_list("id", flat=True)),
        **dashboard_fleet(user=user),
    }


def audit_events_for(
    *,
    access: Any,
    tenant: str = "",
    actor: str = "",
    action_prefix: str = "",
    obj: str = "",
    since: Any = None,
    until: Any = None,
) -> Any:
    """Audit events the caller may read, newest first (the reach is adapters/access.py's
    `audit_tenant_ids`). A tenant filter outside that reach is not found; no reach at all is
    forbidden. Pages and the API both list through here."""
    from django.db.models import Q

    from core.audit_models import AuditEvent
    from core.errors import NotFound
    from tenants.models import Tenant

    qs = AuditEvent.objects.order_by("-id")
    reach = access.require_audit_reader()
    if reach is not None:
        if tenant and not Tenant.objects.filter(id__in=reach, slug=tenant).exists():
            raise NotFound("tenant.not_found", f"No tenant '{tenant}' whose audit you may read.")
        qs = qs.filter(tenant_id__in=reach)
    if tenant:
        qs = qs.filter(tenant_label=tenant)
    if actor:
        qs = qs.filter(actor_label=actor)
    if action_prefix:
        qs = qs.filter(action__startswith=action_prefix)
    if obj:
        qs = qs.filter(Q(object_id__startswith=obj) | Q(object_type=obj))
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    return qs
