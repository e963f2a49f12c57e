"""A tenant's notifications page: what it was told, and (owners) where it goes: e-mail
recipients and webhooks, each webhook's deliveries with every attempt and its answer."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from core.errors import ApplicationError
from core.request import PortalRequest
from tenants.access_port import Access
from tenants.models import Tenant
from tenants.notifications import selectors, services
from tenants.pagekit import page_view, post_text, render_page, tenant_scope

MANAGE = services.MANAGE


def _page(
    request: PortalRequest,
    access: Access,
    tenant: Tenant,
    *,
    error: ApplicationError | None = None,
    secret: str = "",
) -> HttpResponse:
    can_manage = access.tenant_can(tenant, MANAGE)
    context = {
        "tenant": tenant,
        "notifications": selectors.notifications_of(tenant=tenant)[:50],
        "can_manage": can_manage,
        "form": request.POST if error else None,
        "secret": secret,
    }
    if can_manage:
        context.update(
            recipients=selectors.email_recipients_of(tenant=tenant),
            effective=selectors.email_recipients_effective(tenant=tenant),
            webhooks=selectors.webhooks_of(tenant=tenant),
            deliveries=selectors.deliveries_of(tenant=tenant)[:50],
        )
    return render_page(request, "tenants/notifications.html", context, error=error)


@page_view
def notifications(request: PortalRequest, tenant: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    return _page(request, access, found)


@page_view
@require_POST
def recipient_add(request: PortalRequest, tenant: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    email = post_text(request, "email", max_length=254)
    try:
        services.email_recipient_add(
            access=access, tenant=found, email=email, request_id=request.request_id
        )
    except ApplicationError as exc:
        return _page(request, access, found, error=exc)
    messages.success(request, f"{email} now gets this tenant's notifications by e-mail.")
    return redirect("tenant-notifications", tenant=found.slug)


@page_view
@require_POST
def recipient_remove(request: PortalRequest, tenant: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    access.require_tenant(found, MANAGE)
    recipient = services.email_recipient_get(
        tenant=found, email=post_text(request, "email", max_length=254)
    )
    services.email_recipient_remove(
        access=access, recipient=recipient, request_id=request.request_id
    )
    messages.success(request, f"{recipient.email} removed.")
    return redirect("tenant-notifications", tenant=found.slug)


@page_view
@require_POST
def webhook_add(request: PortalRequest, tenant: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    try:
        hook, secret = services.webhook_create(
            access=access,
            tenant=found,
            name=post_text(request, "name", max_length=40),
            url=post_text(request, "url", max_length=2001),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _page(request, access, found, error=exc)
    # The secret is shown on this answer only (not after a redirect, where it would sit in a
    # session message).
    return _page(request, access, found, secret=f"{hook.name}: {secret}")


@page_view
@require_POST
def webhook_active(request: PortalRequest, tenant: str, webhook: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    access.require_tenant(found, MANAGE)
    hook = services.webhook_get(tenant=found, name=webhook)
    active = request.POST.get("active") == "on"
    services.webhook_update(access=access, hook=hook, active=active, request_id=request.request_id)
    messages.success(request, f"Webhook '{hook.name}' {'on' if active else 'off'}.")
    return redirect("tenant-notifications", tenant=found.slug)


@page_view
@require_POST
def webhook_delete(request: PortalRequest, tenant: str, webhook: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    access.require_tenant(found, MANAGE)
    hook = services.webhook_get(tenant=found, name=webhook)
    services.webhook_delete(access=access, hook=hook, request_id=request.request_id)
    messages.success(request, f"Webhook '{webhook}' deleted.")
    return redirect("tenant-notifications", tenant=found.slug)


@page_view
@require_POST
def notice_dismiss(request: PortalRequest, tenant: str, notification: int) -> HttpResponse:
    """Dismiss a notice for the caller, then back to the page it was dismissed on."""
    access, found = tenant_scope(request, tenant)
    services.notice_dismiss(
        access=access,
        notification=selectors.notification_get(tenant=found, notification_id=notification),
        request_id=request.request_id,
    )
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(back)
    return redirect("tenant-notifications", tenant=found.slug)
