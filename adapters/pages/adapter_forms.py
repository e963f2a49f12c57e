"""Creating an adapter (tenant home) and changing its settings (adapter page), read through the
API's serializers and written by the registry services, which check who may do it."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from adapters import serializers as s
from adapters.pages.lookup import adapter_in_scope, tenant_scope
from adapters.pages.registry import adapter_page, tenant_page
from adapters.services.registry import PLATFORM_FIELDS, adapter_create, adapter_update
from core.errors import ApplicationError
from core.request import PortalRequest
from tenants.pageforms import form_data
from tenants.pagekit import page_view

# What the tenant's own settings form sends; pool and SLO class are the platform admins' form.
TENANT_FORM_FIELDS = (
    "description",
    "warmup_policy",
    "warmup_timezone",
    "warmup_days",
    "warmup_start",
    "warmup_end",
    "max_concurrent_requests",
)


@page_view
@require_POST
def adapter_create_page(request: PortalRequest, tenant: str) -> HttpResponse:
    scope = tenant_scope(request, tenant)
    # Refuse a role without the right before reading its input, as the API does.
    scope.access.require_tenant(scope.tenant, "create_adapter")
    try:
        data = form_data(s.AdapterSerializer, request.POST, code="adapter.invalid")
        created = adapter_create(
            access=scope.access,
            tenant=scope.tenant,
            name=data.pop("name"),
            base_model=data.pop("base_model"),
            request_id=request.request_id,
            **data,
        )
    except ApplicationError as exc:
        return tenant_page(request, scope, exc)
    messages.success(request, f"Adapter '{created.name}' created; upload its first version.")
    return redirect("adapter-detail", tenant=tenant, adapter=created.name)


@page_view
@require_POST
def adapter_update_page(request: PortalRequest, tenant: str, adapter: str) -> HttpResponse:
    """`part=platform` carries pool and SLO class (platform admins); else the tenant's fields."""
    scope, found = adapter_in_scope(request, tenant, adapter)
    fields = PLATFORM_FIELDS if request.POST.get("part") == "platform" else TENANT_FORM_FIELDS
    # A QueryDict, so an empty optional field reads as the API's "not given" / null.
    posted = QueryDict(mutable=True)
    for name in fields:
        if name in request.POST:
            posted[name] = request.POST[name]
    try:
        data = form_data(
            s.AdapterUpdateSerializer, posted, code="adapter.invalid", instance=found, partial=True
        )
        adapter_update(access=scope.access, adapter=found, request_id=request.request_id, **data)
    except ApplicationError as exc:
        return adapter_page(request, scope, found, exc)
    messages.success(request, f"Settings of '{found.name}' saved.")
    return redirect("adapter-detail", tenant=tenant, adapter=adapter)
