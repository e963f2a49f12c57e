"""Pages for a user's own API tokens: list, create (plaintext shown once), revoke."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.errors import ApplicationError
from core.request import PortalRequest
from tenants.models import SloClass, TokenScope
from tenants.pagekit import access_for, page_view, post_int, post_text, render_page
from tenants.selectors import token_get, tokens_of
from tenants.services.service_classes import token_class_set
from tenants.services.tokens import MAX_EXPIRY_DAYS, token_issue, token_revoke


def _tokens_context(request: PortalRequest, **extra: object) -> dict[str, object]:
    return {
        "tokens": tokens_of(user=request.user),
        "scopes": TokenScope.values,
        "tenants": access_for(request).visible_tenants(),
        "max_expiry_days": MAX_EXPIRY_DAYS,
        "service_classes": SloClass.values,
        **extra,
    }


@page_view
def tokens(request: PortalRequest) -> HttpResponse:
    if request.method != "POST":
        return render_page(request, "tenants/tokens.html", _tokens_context(request))
    access = access_for(request)
    try:
        slug = post_text(request, "tenant", max_length=40)
        issued = token_issue(
            access=access,
            scopes=request.POST.getlist("scopes"),
            tenant=access.get_tenant(slug) if slug else None,
            name=post_text(request, "name", max_length=100),
            expires_in_days=post_int(
                request, "expires_in_days", code="token.bad_expiry", default=90
            ),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return render_page(
            request, "tenants/tokens.html", _tokens_context(request, form=request.POST), error=exc
        )
    # Rendered, never redirected or stored: the plaintext exists only in this one response.
    response = render_page(request, "tenants/tokens.html", _tokens_context(request, issued=issued))
    response["Cache-Control"] = "no-store"
    return response


@page_view
@require_POST
def token_class_page(request: PortalRequest, token_id: int) -> HttpResponse:
    """POST {service_class}: a lower service class for a tenant's token (docs/classes.md)."""
    access = access_for(request)
    token = token_get(access=access, token_id=token_id)
    try:
        token_class_set(
            access=access,
            token=token,
            service_class=post_text(request, "service_class"),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return render_page(request, "tenants/tokens.html", _tokens_context(request), error=exc)
    return redirect("tokens")


@page_view
@require_POST
def token_revoke_page(request: PortalRequest, token_id: int) -> HttpResponse:
    access = access_for(request)
    token_revoke(
        access=access,
        token=token_get(access=access, token_id=token_id),
        request_id=request.request_id,
    )
    return redirect("tokens")
