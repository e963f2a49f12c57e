"""Cost pages: the fleet's (platform admins and auditors; admins also set the price there) and
one tenant's share (its owners). Numbers come from gateway.cost, as the API's do; the CSV link
is the API's own."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.errors import ApplicationError
from gateway.cost import cost_report, cost_settings, cost_settings_update
from gateway.serializers import usage_range
from tenants.models import Tenant
from tenants.pagekit import access_for, page_view, post_text, render_page


def _cost_page(request: HttpRequest, tenant: Tenant | None, **extra: Any) -> HttpResponse:
    access = access_for(request)
    access.cost_tenant_reach(tenant)  # 403 before anything is read
    context: dict[str, Any] = {"tenant": tenant, "report": None, **extra}
    try:
        day_from, day_to = usage_range(request.GET)
    except ApplicationError as exc:
        return render_page(request, "gateway/cost.html", context, error=exc)
    report = cost_report(access=access, day_from=day_from, day_to=day_to, tenant=tenant)
    query = {"from": day_from.isoformat(), "to": day_to.isoformat(), "format": "csv"}
    if tenant is not None:
        query["tenant"] = tenant.slug
    context.update(
        report=report,
        day_from=day_from,
        day_to=day_to,
        csv_url=f"{reverse('cost')}?{urlencode(query)}",
        settings=cost_settings(),
        may_set_price=tenant is None and access.is_platform_admin,
    )
    return render_page(request, "gateway/cost.html", context)


@page_view
def tenant_cost(request: HttpRequest, tenant: str) -> HttpResponse:
    return _cost_page(request, access_for(request).get_tenant(tenant))


@page_view
def platform_cost(request: HttpRequest) -> HttpResponse:
    return _cost_page(request, None)


@page_view
@require_POST
def platform_cost_settings(request: HttpRequest) -> HttpResponse:
    access = access_for(request)
    try:
        cost_settings_update(
            access=access,
            price_per_engine_hour=post_text(request, "price_per_engine_hour", max_length=20),
            currency=post_text(request, "currency", max_length=3),
            dedicated_slots=post_text(request, "dedicated_slots", max_length=5),
            request_id=getattr(request, "request_id", ""),
        )
    except ApplicationError as exc:
        if exc.status == 403:
            raise
        return _cost_page(request, None, settings_error=exc)
    messages.success(request, "The price per engine-hour is saved.")
    return redirect("platform-cost")
