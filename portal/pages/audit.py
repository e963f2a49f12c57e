"""Pages the portal app owns: the audit log, with filters, pages and a chain check."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from core.errors import ApplicationError, PermissionDenied
from portal.audit_verify import verify_chain
from portal.selectors import audit_events_for
from tenants.pagekit import access_for, is_htmx, page_view

AUDIT_PAGE_SIZE = 50
AUDIT_FILTERS = ("tenant", "actor", "action", "object", "since", "until")


def _day_start(raw: str, name: str, *, days_after: int = 0) -> datetime | None:
    if not raw:
        return None
    try:
        day = datetime.strptime(raw, "%Y-%m-%d").date() + timedelta(days=days_after)  # noqa: DTZ007
    except ValueError:
        raise ApplicationError(
            "audit.bad_date", f"'{name}' must be a date like 2025-01-31."
        ) from None
    return timezone.make_aware(datetime.combine(day, time.min))


@page_view
def audit_log(request: HttpRequest) -> HttpResponse:
    access = access_for(request)
    filters = {name: request.GET.get(name, "").strip()[:200] for name in AUDIT_FILTERS}
    events = audit_events_for(
        access=access,
        tenant=filters["tenant"],
        actor=filters["actor"],
        action_prefix=filters["action"],
        obj=filters["object"],
        since=_day_start(filters["since"], "since"),
        # `until` is inclusive: everything before the start of the next day.
        until=_day_start(filters["until"], "until", days_after=1),
    )
    page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "portal/audit.html",
        {
            "page": page,
            "filters": filters,
            "can_verify": access.may_verify_audit(),
            "export_urls": _export_urls(access, filters),
        },
    )


def _export_urls(access: Any, filters: dict[str, str]) -> dict[str, str]:
    """The API's streamed export of what the page filters (tenant, action prefix, days), for
    those adapters/access.py lets export it; none for the others."""
    slug = filters["tenant"]
    tenant = access.visible_tenants().filter(slug=slug).first() if slug else None
    try:
        access.require_audit_export(tenant)
    except PermissionDenied:
        return {}
    query = {"tenant": slug, "from": filters["since"], "to": filters["until"]}
    if filters["action"]:
        query["action"] = filters["action"] + "*"
    base = reverse("audit-export")
    return {
        fmt: f"{base}?{urlencode({'format': fmt, **{k: v for k, v in query.items() if v}})}"
        for fmt in ("csv", "jsonl")
    }


@page_view
def audit_verify(request: HttpRequest) -> HttpResponse:
    if not access_for(request).may_verify_audit():
        raise PermissionDenied(
            "audit.not_platform_admin", "Only platform admins may verify the audit chain."
        )
    report = verify_chain()
    template = "portal/_audit_verify.html" if is_htmx(request) else "portal/audit_verify.html"
    return render(request, template, {"report": report})
