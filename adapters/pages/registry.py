"""Pages for a tenant's home and adapters and their versions, with the owner's release and disable."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from adapters.fleet_port import fleet
from adapters.models import AdapterVersion, BaseModel, VersionStatus, WarmupPolicy
from adapters.page_panels import version_panels
from adapters.page_selectors import lifecycle_steps, tenant_summary, version_timeline
from adapters.pages.lookup import Scope, adapter_in_scope, tenant_scope, version_in_scope
from adapters.selectors import adapters_for, versions_of
from adapters.services.direct_uploads import pending_uploads
from adapters.services.lifecycle import version_disable, version_release
from adapters.tracing import trace_url
from core.errors import ApplicationError
from core.request import PortalRequest
from tenants.models import ServiceClass, SloClass
from tenants.pagekit import page_view, post_text, render_page

RELEASABLE = (VersionStatus.STAGED,)
DISABLEABLE = (VersionStatus.STAGED, VersionStatus.ACTIVE)


def _owner_actions(scope: Scope, adapter: Any) -> dict[str, Any]:
    can_release = scope.access.adapter_can(adapter, "release_version")
    return {
        "can_release": can_release,
        "can_disable": scope.access.may_disable(adapter),
        "can_upload": scope.access.adapter_can(adapter, "upload_version"),
        "releasable": RELEASABLE,
        "disableable": DISABLEABLE,
    }


def tenant_page(
    request: HttpRequest, scope: Scope, error: ApplicationError | None = None
) -> HttpResponse:
    """The tenant home: its numbers (for those who see its details), adapters, a create form."""
    adapters = adapters_for(access=scope.access, tenant=scope.tenant)
    details = scope.access.sees_tenant_details(scope.tenant)
    return render_page(
        request,
        "adapters/tenant_adapters.html",
        {
            "tenant": scope.tenant,
            "adapters": adapters,
            "role": scope.access.tenant_role(scope.tenant),
            "summary": tenant_summary(tenant=scope.tenant, adapters=adapters) if details else None,
            "service_class": ServiceClass.objects.filter(name=scope.tenant.slo_class).first()
            if details
            else None,
            "can_create": scope.access.tenant_can(scope.tenant, "create_adapter"),
            "base_models": BaseModel.objects.order_by("name"),
            "warmup_policies": WarmupPolicy.choices,
            "form": request.POST if error else None,
        },
        error=error,
    )


@page_view
def tenant_adapters(request: HttpRequest, tenant: str) -> HttpResponse:
    return tenant_page(request, tenant_scope(request, tenant))


def adapter_page(
    request: HttpRequest, scope: Scope, adapter: Any, error: ApplicationError | None = None
) -> HttpResponse:
    return render_page(
        request,
        "adapters/adapter_detail.html",
        {
            "tenant": scope.tenant,
            "adapter": adapter,
            "versions": versions_of(adapter=adapter).prefetch_related("decisions__actor"),
            "can_change": scope.access.adapter_can(adapter, "change_adapter"),
            # Pool and SLO class decide capacity for every tenant: platform admins only.
            "can_set_platform": scope.access.is_platform_admin,
            "warmup_policies": WarmupPolicy.choices,
            "slo_classes": SloClass.choices,
            # Direct-to-storage uploads started through the API and not completed yet.
            "pending_uploads": (
                pending_uploads(access=scope.access, adapter=adapter)
                if scope.access.adapter_can(adapter, "upload_version")
                else []
            ),
            **_owner_actions(scope, adapter),
        },
        error=error,
    )


@page_view
def adapter_detail(request: HttpRequest, tenant: str, adapter: str) -> HttpResponse:
    scope, found = adapter_in_scope(request, tenant, adapter)
    return adapter_page(request, scope, found)


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
            "steps": lifecycle_steps(version),
            "timeline": version_timeline(version),
            "can_review": version.status == VersionStatus.VALIDATED
            and scope.access.may_review(version),
            # Where it runs; members see engine names (not the engines' pages or actions).
            "placement": fleet().version_placement(version),
            "links_engines": scope.access.sees_engines,
            "may_read_evidence": scope.access.may_read_evidence(scope.tenant),
            "trace_url": trace_url(version),  # its lifecycle's traces, from its upload
            # What the apps above add (the eval gate's run, side by side): page_panels.
            "panels": version_panels(request=request, access=scope.access, version=version),
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
    request: PortalRequest, tenant: str, adapter: str, number: int
) -> HttpResponse:
    scope, version = version_in_scope(request, tenant, adapter, number)
    try:
        result = version_release(
            version=version,
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
    request: PortalRequest, tenant: str, adapter: str, number: int
) -> HttpResponse:
    scope, version = version_in_scope(request, tenant, adapter, number)
    try:
        result = version_disable(
            version=version,
            reason=post_text(request, "reason"),
            access=scope.access,
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _version_page(request, scope, version, exc)
    messages.success(request, f"{result} is disabled; engines unload it.")
    return redirect("version-detail", tenant=tenant, adapter=adapter, number=number)
