"""Platform admins' single sign-on page: each provider's mappings (add, remove) and the dry run.
The checks and writes are the API's (tenants/sso/services/mappings.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.errors import ApplicationError, NotFound
from core.json_depth import loads_bounded
from core.request import PortalRequest
from tenants.models import PlatformRole, Tenant, TenantRole
from tenants.pageforms import form_data, require_platform_role
from tenants.pagekit import access_for, page_view, render_page
from tenants.sso.api import MappingSerializer
from tenants.sso.models import SsoMapping
from tenants.sso.providers import configured_providers
from tenants.sso.services.mappings import mapping_create, mapping_delete, mapping_dry_run

# A provider's claims nest 2-3 levels (groups, addresses); a 100,000-deep paste was a 500.
MAX_CLAIMS_DEPTH = 32


def _page(
    request: PortalRequest,
    *,
    error: ApplicationError | None = None,
    dry_run: dict[str, Any] | None = None,
) -> HttpResponse:
    mappings = SsoMapping.objects.select_related("tenant")
    providers = [
        {"provider": p, "mappings": [m for m in mappings if m.provider == p.name]}
        for p in configured_providers()
    ]
    return render_page(
        request,
        "tenants/platform_sso.html",
        {
            "providers": providers,
            "tenants": Tenant.objects.order_by("slug"),
            "roles": TenantRole.values,
            "platform_roles": PlatformRole.values,
            "form": request.POST if error or dry_run else None,
            "dry_run": dry_run,
        },
        error=error,
    )


@page_view
def platform_sso(request: PortalRequest) -> HttpResponse:
    """GET: providers and their mappings; POST {provider, claim, value, tenant + role or
    platform_role}: add a mapping."""
    require_platform_role(access_for(request), "is_platform_admin", "manage single sign-on")
    if request.method != "POST":
        return _page(request)
    try:
        data = form_data(MappingSerializer, request.POST, code="sso.bad_mapping")
        mapping_create(
            access=access_for(request),
            provider=request.POST.get("provider", ""),
            request_id=request.request_id,
            **data,
        )
    except ApplicationError as exc:
        return _page(request, error=exc)
    messages.success(request, "Mapping added; it applies at each person's next sign-in.")
    return redirect("platform-sso")


@page_view
@require_POST
def platform_sso_dry_run(request: PortalRequest) -> HttpResponse:
    """POST {provider, claims (JSON)}: what those claims would give; nothing is saved."""
    require_platform_role(access_for(request), "is_platform_admin", "manage single sign-on")
    try:
        claims = loads_bounded(request.POST.get("claims", "") or "null", MAX_CLAIMS_DEPTH)
    except ValueError as exc:
        refused = ApplicationError("sso.bad_claims", f"The claims are not JSON we take: {exc}.")
        return _page(request, error=refused)
    try:
        result = mapping_dry_run(
            access=access_for(request),
            provider=request.POST.get("provider", ""),
            claims=claims,
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _page(request, error=exc)
    return _page(request, dry_run=result)


def dry_run_page(request: Any, provider: Any, claims: dict[str, Any]) -> HttpResponse:
    """The answer of a dry run as a test user (tenants/sso/views.py): what the claims the
    provider just vouched for would give; the admin stays signed in as themselves."""
    try:
        result = mapping_dry_run(
            access=access_for(request),
            provider=provider.name,
            claims=claims,
            request_id=getattr(request, "request_id", ""),
        )
    except ApplicationError as exc:
        return _page(request, error=exc)
    return _page(request, dry_run={**result, "claims": claims})


@page_view
@require_POST
def platform_sso_mapping_delete(request: PortalRequest, mapping_id: int) -> HttpResponse:
    require_platform_role(access_for(request), "is_platform_admin", "manage single sign-on")
    found = SsoMapping.objects.filter(pk=mapping_id).first()
    if found is None:
        raise NotFound("sso.mapping_not_found", "No such mapping.")
    mapping_delete(access=access_for(request), mapping=found, request_id=request.request_id)
    messages.success(request, "Mapping removed; it applies at each person's next sign-in.")
    return redirect("platform-sso")
