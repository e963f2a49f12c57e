"""Platform admins' pages: tenants (create, plan and quotas), users (create, platform roles).
The checks are the API's (PlatformViewSet's is_platform_admin); the writes its services."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db import models
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.errors import ApplicationError, NotFound
from core.request import PortalRequest
from tenants import serializers as s
from tenants.models import PlatformRole, ServiceClass, SloClass, Tenant
from tenants.pageforms import form_data, require_platform_role
from tenants.pagekit import access_for, page_view, render_page
from tenants.services.service_classes import service_class_update
from tenants.services.tenancy import (
    TENANT_FIELDS,
    tenant_create,
    tenant_update,
    user_create,
    user_update,
)

User = get_user_model()


def _require_admin(request: PortalRequest, what: str) -> None:
    require_platform_role(access_for(request), "is_platform_admin", what)


def _tenant_fields(tenant: Tenant | None) -> list[dict[str, Any]]:
    """The tenant form's inputs, from the fields the services accept (so a new quota shows up)."""
    fields = []
    for name in TENANT_FIELDS:
        model_field = Tenant._meta.get_field(name)
        if not isinstance(model_field, models.Field):  # a reverse relation has no default
            raise LookupError(f"Tenant.{name} is not a concrete field")
        value = getattr(tenant, name) if tenant else model_field.get_default()
        kind = model_field.get_internal_type()
        fields.append(
            {
                "name": name,
                "label": name.replace("_", " "),
                "value": value,
                "kind": "bool"
                if kind == "BooleanField"
                else "int"
                if "Integer" in kind
                else "text",
                "choices": SloClass.values if name == "slo_class" else None,
            }
        )
    return fields


def _tenants_page(request: PortalRequest, error: ApplicationError | None = None) -> HttpResponse:
    return render_page(
        request,
        "tenants/platform_tenants.html",
        {
            "tenants": Tenant.objects.order_by("slug"),
            "fields": _tenant_fields(None),
            "form": request.POST if error else None,
        },
        error=error,
    )


@page_view
def platform_tenants(request: PortalRequest) -> HttpResponse:
    """GET: every tenant; POST {slug, name, plan fields}: create one."""
    _require_admin(request, "manage tenants")
    if request.method != "POST":
        return _tenants_page(request)
    try:
        data = form_data(s.TenantSerializer, request.POST, code="tenant.invalid")
        tenant = tenant_create(
            access=access_for(request),
            slug=data.pop("slug"),
            name=data.pop("name"),
            request_id=request.request_id,
            **data,
        )
    except ApplicationError as exc:
        return _tenants_page(request, exc)
    messages.success(request, f"Tenant '{tenant.slug}' created; add its first owner below.")
    return redirect("platform-tenant", tenant=tenant.slug)


@page_view
def platform_tenant(request: PortalRequest, tenant: str) -> HttpResponse:
    """GET: one tenant's plan; POST: change it (tenant_update, audited)."""
    _require_admin(request, "manage tenants")
    found = Tenant.objects.filter(slug=tenant).first()
    if found is None:
        raise NotFound("tenant.not_found", f"No tenant '{tenant}'.")
    error = None
    if request.method == "POST":
        try:
            data = form_data(
                s.TenantUpdateSerializer, request.POST, code="tenant.invalid", instance=found
            )
            found = tenant_update(
                access=access_for(request), tenant=found, request_id=request.request_id, **data
            )
        except ApplicationError as exc:
            error = exc
        else:
            messages.success(request, f"Tenant '{found.slug}' saved.")
            return redirect("platform-tenant", tenant=found.slug)
    return render_page(
        request,
        "tenants/platform_tenant.html",
        {"tenant": found, "fields": _tenant_fields(found)},
        error=error,
    )


def _users_page(request: PortalRequest, error: ApplicationError | None = None) -> HttpResponse:
    return render_page(
        request,
        "tenants/platform_users.html",
        {
            "users": User.objects.prefetch_related("groups").order_by("username"),
            "roles": PlatformRole.values,
            "form": request.POST if error else None,
        },
        error=error,
    )


@page_view
def platform_users(request: PortalRequest) -> HttpResponse:
    """GET: every user and their platform roles; POST {username, password, email, roles}: create."""
    _require_admin(request, "manage users")
    if request.method != "POST":
        return _users_page(request)
    try:
        data = form_data(s.UserCreateSerializer, request.POST, code="user.invalid")
        user = user_create(
            access=access_for(request),
            roles=data.pop("platform_roles"),
            request_id=request.request_id,
            **data,
        )
    except ApplicationError as exc:
        return _users_page(request, exc)
    messages.success(request, f"User '{user.username}' created.")
    return redirect("platform-users")


def _user(username: str) -> Any:
    user = User.objects.filter(username=username).first()
    if user is None:
        raise NotFound("user.not_found", f"No user '{username}'.")
    return user


@page_view
@require_POST
def platform_user_roles(request: PortalRequest, username: str) -> HttpResponse:
    _require_admin(request, "manage users")
    user = _user(username)
    try:
        roles = form_data(
            s.UserUpdateSerializer, request.POST, code="user.invalid", partial=True
        ).get("platform_roles", [])
        user_update(
            access=access_for(request),
            user=user,
            platform_roles=roles,
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _users_page(request, exc)
    shown = ", ".join(roles) or "none"
    messages.success(request, f"Platform roles of '{username}': {shown}.")
    return redirect("platform-users")


@page_view
@require_POST
def platform_user_active(request: PortalRequest, username: str) -> HttpResponse:
    """`active=true|false`: whether the user may log in (never oneself: user_update refuses)."""
    _require_admin(request, "manage users")
    user = _user(username)
    active = request.POST.get("active") == "true"
    try:
        user_update(
            access=access_for(request), user=user, is_active=active, request_id=request.request_id
        )
    except ApplicationError as exc:
        return _users_page(request, exc)
    messages.success(request, f"'{username}' {'may log in again' if active else 'is deactivated'}.")
    return redirect("platform-users")


@page_view
def platform_classes(request: PortalRequest) -> HttpResponse:
    """GET: the service classes' plans (docs/classes.md); POST {name, weight, max_queue_wait_ms,
    sheddable}: change one (service_class_update, audited)."""
    _require_admin(request, "manage service classes")
    error = None
    if request.method == "POST":
        found = ServiceClass.objects.filter(name=request.POST.get("name", "")).first()
        if found is None:
            raise NotFound("service_class.not_found", "No such service class.")
        try:
            data = form_data(
                s.ServiceClassUpdateSerializer,
                request.POST,
                code="service_class.invalid",
                instance=found,
            )
            service_class_update(
                access=access_for(request),
                service_class=found,
                request_id=request.request_id,
                **data,
            )
        except ApplicationError as exc:
            error = exc
        else:
            messages.success(request, f"Class '{found.name}' saved.")
            return redirect("platform-classes")
    return render_page(
        request,
        "tenants/platform_classes.html",
        {"classes": ServiceClass.objects.all()},
        error=error,
    )
