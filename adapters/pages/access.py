"""A tenant's access page: members and roles, per-adapter grants, the tokens bound to the tenant.

Everyone who may view the tenant sees the page; the forms are shown, and accepted, only for
those who manage its members (the same capabilities /api/v1/tenants/{t}/members/ asks).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from adapters.selectors import adapter_get, adapters_for, grants_of
from core.errors import ApplicationError, NotFound
from core.request import PortalRequest
from tenants.access_port import Access
from tenants.models import Tenant, TenantRole
from tenants.pagekit import page_view, post_text, render_page, tenant_scope
from tenants.selectors import members_of, tenant_tokens
from tenants.services.tenancy import (
    GRANTABLE_ADAPTER_PERMS,
    adapter_grant,
    adapter_revoke_grants,
    membership_remove,
    membership_set,
)
from tenants.services.tokens import token_revoke


def _page(
    request: PortalRequest,
    access: Access,
    tenant: Tenant,
    error: ApplicationError | None = None,
) -> HttpResponse:
    return render_page(
        request,
        "adapters/members.html",
        {
            "tenant": tenant,
            "members": members_of(tenant=tenant),
            "grants": grants_of(access=access, tenant=tenant),
            "tokens": tenant_tokens(access=access, tenant=tenant),
            "adapters": adapters_for(access=access, tenant=tenant),
            "roles": TenantRole.values,
            "grantable": GRANTABLE_ADAPTER_PERMS,
            "can_manage": access.tenant_can(tenant, "manage_members"),
            "form": request.POST if error else None,
        },
        error=error,
    )


def _done(request: PortalRequest, tenant: Tenant, text: str) -> HttpResponse:
    messages.success(request, text)
    return redirect("tenant-members", tenant=tenant.slug)


@page_view
def members(request: PortalRequest, tenant: str) -> HttpResponse:
    """GET: the page; POST {username, role}: add a member or change a role."""
    if request.method != "POST":
        access, found = tenant_scope(request, tenant, "view")
        return _page(request, access, found)
    access, found = tenant_scope(request, tenant, "manage_members")
    username = post_text(request, "username", max_length=150)
    try:
        membership_set(
            access=access,
            tenant=found,
            username=username,
            role=post_text(request, "role", max_length=20),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _page(request, access, found, exc)
    return _done(request, found, f"{username} is now {post_text(request, 'role')} of {found.slug}.")


@page_view
@require_POST
def member_remove(request: PortalRequest, tenant: str, username: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant, "manage_members")
    membership = members_of(tenant=found).filter(user__username=username).first()
    if membership is None:
        raise NotFound("membership.not_found", f"'{username}' is not a member of '{found.slug}'.")
    try:
        membership_remove(access=access, membership=membership, request_id=request.request_id)
    except ApplicationError as exc:
        return _page(request, access, found, exc)
    return _done(request, found, f"{username} is no longer a member of {found.slug}.")


@page_view
@require_POST
def grant_add(request: PortalRequest, tenant: str) -> HttpResponse:
    """{adapter, username, perms[]}: rights on one adapter only, as POST .../adapters/{a}/grants/."""
    access, found = tenant_scope(request, tenant, "manage_members")
    username = post_text(request, "username", max_length=150)
    try:
        adapter = adapter_get(access=access, tenant=found, name=post_text(request, "adapter"))
        perms = adapter_grant(
            access=access,
            adapter=adapter,
            username=username,
            perms=request.POST.getlist("perms"),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _page(request, access, found, exc)
    return _done(request, found, f"{username} may now {', '.join(perms)} on {adapter.name}.")


@page_view
@require_POST
def grant_revoke(request: PortalRequest, tenant: str, adapter: str, username: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant, "manage_members")
    target = adapter_get(access=access, tenant=found, name=adapter)
    adapter_revoke_grants(
        access=access, adapter=target, username=username, request_id=request.request_id
    )
    return _done(request, found, f"{username}'s rights on {adapter} are revoked.")


@page_view
@require_POST
def tenant_token_revoke(request: PortalRequest, tenant: str, prefix: str) -> HttpResponse:
    """Owners revoke any token bound to the tenant; others only their own (as the API)."""
    access, found = tenant_scope(request, tenant, "view")
    token = tenant_tokens(access=access, tenant=found).filter(prefix=prefix).first()
    if token is None:
        raise NotFound("token.not_found", f"No token '{prefix}' of '{found.slug}' you may revoke.")
    try:
        token_revoke(access=access, token=token, request_id=request.request_id)
    except ApplicationError as exc:
        return _page(request, access, found, exc)
    return _done(request, found, f"Token lp_{prefix}_… is revoked.")
