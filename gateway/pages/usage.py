"""Usage pages for chargeback: one tenant's (its owners, platform admins) and every tenant's
(platform admins), per adapter version and day, with totals and the API's CSV export."""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from core.errors import ApplicationError
from gateway.selectors import UsageRow, usage_rows
from gateway.serializers import usage_range
from gateway.usage import require_usage_reader
from tenants.models import Tenant
from tenants.pageforms import require_platform_role
from tenants.pagekit import access_for, page_view, render_page


def _totals(rows: list[UsageRow]) -> list[dict[str, Any]]:
    """Per tenant and adapter over the range: what a chargeback line shows."""
    sums: dict[tuple[str, str], dict[str, int]] = defaultdict(
        lambda: {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    )
    for row in rows:
        line = sums[(row.tenant, row.adapter or "(base model)")]
        line["requests"] += row.requests
        line["prompt_tokens"] += row.prompt_tokens
        line["completion_tokens"] += row.completion_tokens
    return [{"tenant": t, "adapter": a, **n} for (t, a), n in sorted(sums.items())]


def _usage_page(request: HttpRequest, tenant: Tenant | None, csv_path: str) -> HttpResponse:
    context: dict[str, Any] = {"tenant": tenant, "rows": [], "totals": []}
    try:
        day_from, day_to = usage_range(request.GET)
    except ApplicationError as exc:
        return render_page(request, "gateway/usage.html", context, error=exc)
    rows = usage_rows(day_from=day_from, day_to=day_to, tenant_id=tenant.id if tenant else None)
    query = {"from": day_from.isoformat(), "to": day_to.isoformat(), "format": "csv"}
    if tenant is None and request.GET.get("tenant"):
        query["tenant"] = request.GET["tenant"]
    context.update(
        rows=rows,
        totals=_totals(rows),
        day_from=day_from,
        day_to=day_to,
        # The export is the API's own CSV (session auth), so page and API never disagree.
        csv_url=f"{csv_path}?{urlencode(query)}",
    )
    return render_page(request, "gateway/usage.html", context)


@page_view
def tenant_usage(request: HttpRequest, tenant: str) -> HttpResponse:
    access = access_for(request)
    found = access.get_tenant(tenant)
    require_usage_reader(access, found)
    return _usage_page(request, found, reverse("tenant-usage-list", kwargs={"tenant": found.slug}))


@page_view
def platform_usage(request: HttpRequest) -> HttpResponse:
    """Every tenant's usage; `?tenant=` narrows it to one."""
    access = access_for(request)
    require_platform_role(access, "is_platform_admin", "read every tenant's usage")
    slug = request.GET.get("tenant", "").strip()[:40]
    found = access.get_tenant(slug) if slug else None
    page = _usage_page(request, found, reverse("usage-list"))
    return page
