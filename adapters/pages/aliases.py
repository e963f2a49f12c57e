"""The aliases page: list, create or replace weighted targets (summing to 100), delete."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from adapters.models import VersionStatus
from adapters.pages.lookup import Scope, tenant_scope
from adapters.selectors import aliases_for, versions_visible
from adapters.services.aliases import (
    TOTAL_WEIGHT,
    alias_delete,
    alias_set,
    parse_version_ref,
)
from adapters.services.releases import alias_promote, alias_rollback, revisions_of
from core.errors import ApplicationError, NotFound
from core.request import PortalRequest
from tenants.pagekit import page_view, post_int, post_text, render_page

TARGET_ROWS = 4
REVISIONS_SHOWN = 5


def _targets(request: PortalRequest) -> list[dict[str, Any]]:
    targets = []
    for row in range(TARGET_ROWS):
        ref = post_text(request, f"version_{row}", max_length=60)
        if not ref:
            continue
        parse_version_ref(ref)
        weight = post_int(request, f"weight_{row}", code="alias.bad_weights")
        if weight is None or not 1 <= weight <= TOTAL_WEIGHT:
            raise ApplicationError(
                "alias.bad_weights", f"Give '{ref}' a weight from 1 to {TOTAL_WEIGHT}."
            )
        targets.append({"version": ref, "weight": weight})
    return targets


def _aliases_page(
    request: PortalRequest, scope: Scope, error: ApplicationError | None = None
) -> HttpResponse:
    return render_page(
        request,
        "adapters/aliases.html",
        {
            "tenant": scope.tenant,
            "aliases": [
                {"alias": a, "revisions": revisions_of(alias=a)[:REVISIONS_SHOWN]}
                for a in aliases_for(tenant=scope.tenant)
            ],
            "active_versions": versions_visible(access=scope.access).filter(
                tenant=scope.tenant, status=VersionStatus.ACTIVE
            ),
            "can_manage": scope.access.tenant_can(scope.tenant, "manage_aliases"),
            "rows": range(TARGET_ROWS),
            "total_weight": TOTAL_WEIGHT,
            "form": request.POST if error else None,
        },
        error=error,
    )


@page_view
def aliases(request: PortalRequest, tenant: str) -> HttpResponse:
    scope = tenant_scope(request, tenant)
    if request.method != "POST":
        # As GET /api/v1/tenants/{t}/aliases/: the tenant's members and cross-tenant roles; a
        # grantee of one adapter sees nothing else of the tenant.
        scope.access.require_tenant(scope.tenant, "view")
        return _aliases_page(request, scope)
    # Refuse a role without the right before reading its input, as the API does.
    scope.access.require_tenant(scope.tenant, "manage_aliases")
    name = post_text(request, "name", max_length=40)
    try:
        alias_set(
            access=scope.access,
            tenant=scope.tenant,
            name=name,
            targets=_targets(request),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _aliases_page(request, scope, exc)
    messages.success(request, f"Alias '{name}' saved.")
    return redirect("tenant-aliases", tenant=tenant)


def _alias(scope: Scope, name: str) -> Any:
    found = aliases_for(tenant=scope.tenant).filter(name=name).first()
    if found is None:
        raise NotFound("alias.not_found", f"Tenant '{scope.tenant.slug}' has no alias '{name}'.")
    return found


@page_view
@require_POST
def alias_delete_page(request: PortalRequest, tenant: str, alias: str) -> HttpResponse:
    scope = tenant_scope(request, tenant)
    found = _alias(scope, alias)
    alias_delete(access=scope.access, alias=found, request_id=request.request_id)
    messages.success(request, f"Alias '{alias}' deleted.")
    return redirect("tenant-aliases", tenant=tenant)


@page_view
@require_POST
def alias_promote_page(request: PortalRequest, tenant: str, alias: str) -> HttpResponse:
    """All of the alias's traffic to one of its active versions (`version`: adapter@N)."""
    scope = tenant_scope(request, tenant)
    found = _alias(scope, alias)
    scope.access.require_tenant(scope.tenant, "manage_aliases")
    ref = post_text(request, "version", max_length=60)
    try:
        parse_version_ref(ref)
        alias_promote(
            access=scope.access,
            alias=found,
            version=ref,
            reason=post_text(request, "reason"),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _aliases_page(request, scope, exc)
    messages.success(request, f"Alias '{alias}' now sends all traffic to {ref}.")
    return redirect("tenant-aliases", tenant=tenant)


@page_view
@require_POST
def alias_rollback_page(request: PortalRequest, tenant: str, alias: str) -> HttpResponse:
    """Back to the targets the alias had before its current revision."""
    scope = tenant_scope(request, tenant)
    found = _alias(scope, alias)
    try:
        alias_rollback(
            access=scope.access,
            alias=found,
            reason=post_text(request, "reason"),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _aliases_page(request, scope, exc)
    messages.success(request, f"Alias '{alias}' is rolled back to its previous targets.")
    return redirect("tenant-aliases", tenant=tenant)
