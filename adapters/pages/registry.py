"""Pages for a tenant's adapters and their versions, with the owner's release and disable."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from adapters.models import AdapterVersion, VersionStatus
from adapters.pages.lookup import Scope, adapter_in_scope, tenant_scope, version_in_scope
from adapters.selectors import adapters_for, versions_of
from adapters.services.lifecycle import version_disable, version_release
from portal.errors import ApplicationError
from portal.pagekit import page_view, post_text, render_page
from workers.selectors import version_placement

RELEASABLE = (VersionStatus.STAGED,)
DISABLEABLE = (VersionStatus.STAGED, VersionStatus.ACTIVE)


def _owner_actions(scope: Scope, adapter: Any) -> dict[str, bool]:
    can_release = scope.access.adapter_can(adapter, "release_version")
    return {
        "can_release": can_release,
        "can_disable": can_release or scope.access.is_platform_admin,
        "can_upload": scope.access.adapter_can(adapter, "upload_version"),
        "releasable": RELEASABLE,
        "disableable": DISABLEABLE,
    }


@page_view
def tenant_adapters(request: HttpRequest, tenant: str) -> HttpResponse:
    scope = tenant_scope(request, tenant)
    return render(
        request,
        "adapters/tenant_adapters.html",
        {
            "tenant": scope.tenant,
            "adapters": adapters_for(access=scope.access, tenant=scope.tenant),
            "role": scope.access.tenant_role(scope.tenant),
        },
    )


@page_view
def adapter_detail(request: HttpRequest, tenant: str, adapter: str) -> HttpResponse:
    scope, found = adapter_in_scope(request, tenant, adapter)
    return render(
        request,
        "adapters/adapter_detail.html",
        {
            "tenant": scope.tenant,
            "adapter": found,
            "versions": versions_of(adapter=found).prefetch_related("decisions__actor"),
            **_owner_actions(scope, found),
        },
    )


def _version_page(
    request: HttpRequest,
    scope: Scope,
    version: AdapterVersion,
    error: ApplicationError | None = None,
) -> HttpResponse:
    return render_page(
        request,
        "adapters/version_detail.html",
        {
            "tenant": scope.tenant,
            "adapter": version.adapter,
            "version": version,
            "report": version.validation_report or {},
            # Where it runs; members see engine names (not the engines' pages or actions).
            "placement": version_placement(version),
            "links_engines": scope.access.is_operator,
            **_owner_actions(scope, version.adapter),
        },
        error=error,
    )


@page_view
def version_detail(request: HttpRequest, tenant: str, adapter: str, number: int) -> HttpResponse:
    scope, version = version_in_scope(request, tenant, adapter, number)
    return _version_page(request, scope, version)


@page_view
@require_POST
def version_release_page(
    request: HttpRequest, tenant: str, adapter: str, number: int
) -> HttpResponse:
    scope, version = version_in_scope(request, tenant, adapter, number)
    try:
        result = version_release(
            version=version,
            actor=request.user,
            comment=post_text(request, "comment"),
            access=scope.access,
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _version_page(request, scope, version, exc)
    if result.status == VersionStatus.ACTIVE:
        messages.success(request, f"{result} is released and active.")
    else:
        messages.info(
            request,
            f"Release approval for {result} recorded; a second approval by someone else is needed.",
        )
    return redirect("version-detail", tenant=tenant, adapter=adapter, number=number)


@page_view
@require_POST
def version_disable_page(
    request: HttpRequest, tenant: str, adapter: str, number: int
) -> HttpResponse:
    scope, version = version_in_scope(request, tenant, adapter, number)
    try:
        result = version_disable(
            version=version,
            actor=request.user,
            reason=post_text(request, "reason"),
            access=scope.access,
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _version_page(request, scope, version, exc)
    messages.success(request, f"{result} is disabled; engines unload it.")
    return redirect("version-detail", tenant=tenant, adapter=adapter, number=number)
