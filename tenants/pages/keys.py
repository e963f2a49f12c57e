"""A tenant's signing keys and signature policy: members read, owners add, revoke and decide
whether uploads must be signed (the services check manage_keys, as for the API)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.errors import ApplicationError
from core.request import PortalRequest
from tenants.access_port import Access
from tenants.models import Tenant
from tenants.pagekit import page_view, post_text, render_page, tenant_scope
from tenants.services import signing_keys as service


def _page(
    request: PortalRequest,
    access: Access,
    tenant: Tenant,
    error: ApplicationError | None = None,
) -> HttpResponse:
    keys = [
        {"key": key, "fingerprint": service.key_fingerprint(key.public_key_pem)}
        for key in service.signing_keys_of(tenant=tenant)
    ]
    return render_page(
        request,
        "tenants/keys.html",
        {
            "tenant": tenant,
            "keys": keys,
            "policy": service.signature_policy(tenant=tenant),
            "can_manage": access.tenant_can(tenant, "manage_keys"),
            "form": request.POST if error else None,
        },
        error=error,
    )


@page_view
def keys(request: PortalRequest, tenant: str) -> HttpResponse:
    """GET: keys and policy; POST {name, public_key_pem}: add a key."""
    access, found = tenant_scope(request, tenant)
    if request.method != "POST":
        return _page(request, access, found)
    access.require_tenant(found, "manage_keys")
    name = post_text(request, "name", max_length=40)
    try:
        service.signing_key_add(
            access=access,
            tenant=found,
            name=name,
            public_key_pem=request.POST.get("public_key_pem", "")[: service.MAX_PEM_CHARS + 1],
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _page(request, access, found, exc)
    messages.success(request, f"Signing key '{name}' added.")
    return redirect("tenant-keys", tenant=found.slug)


@page_view
@require_POST
def key_revoke(request: PortalRequest, tenant: str, key: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    service.signing_key_revoke(
        access=access,
        key=service.signing_key_get(tenant=found, name=key),
        request_id=request.request_id,
    )
    messages.success(request, f"Signing key '{key}' revoked; signatures made with it now fail.")
    return redirect("tenant-keys", tenant=found.slug)


@page_view
@require_POST
def signature_policy(request: PortalRequest, tenant: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    required = request.POST.get("require_signatures") == "on"
    try:
        service.signature_policy_set(
            access=access, tenant=found, require_signatures=required, request_id=request.request_id
        )
    except ApplicationError as exc:
        return _page(request, access, found, exc)
    messages.success(
        request, "Uploads must now be signed." if required else "Signatures are now optional."
    )
    return redirect("tenant-keys", tenant=found.slug)
