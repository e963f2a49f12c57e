"""The operators' fleet-wide pages: pools, residency and pins across engines, warm-up schedules,
open alarms. Read-only: every action is on the engine's page (workers/pages/engines.py), where the rules
that refuse it are shown next to the row."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from tenants.pagekit import page_view
from workers.alarms import open_alarms
from workers.page_selectors import overview
from workers.pages.engines import _require_operator


@page_view
def pools(request: HttpRequest) -> HttpResponse:
    _require_operator(request)
    return render(request, "workers/pools.html", {"pools": overview.pools(), "tab": "pools"})


@page_view
def residency(request: HttpRequest) -> HttpResponse:
    """`?engine=`, `?tenant=`, `?pinned=1` narrow the list (pins are desired pins)."""
    _require_operator(request)
    engine = request.GET.get("engine", "").strip()[:100]
    tenant = request.GET.get("tenant", "").strip()[:40]
    pinned = request.GET.get("pinned") == "1"
    filters = {"engine": engine, "tenant": tenant, "pinned": pinned}
    rows = overview.fleet_residency(engine=engine, tenant=tenant, pinned_only=pinned)
    context = {"rows": rows, "filters": filters, "limit": overview.ROW_LIMIT, "tab": "residency"}
    return render(request, "workers/residency.html", context)


@page_view
def schedules(request: HttpRequest) -> HttpResponse:
    _require_operator(request)
    context = {
        "entries": overview.all_warmup_entries(),
        "adapters": overview.scheduled_adapters(),
        "tab": "schedules",
    }
    return render(request, "workers/schedules.html", context)


@page_view
def alarms(request: HttpRequest) -> HttpResponse:
    _require_operator(request)
    context = {
        "alarms": open_alarms().order_by("-raised_at")[: overview.ROW_LIMIT],
        "tab": "alarms",
    }
    return render(request, "workers/alarms.html", context)


@page_view
def advice(request: HttpRequest) -> HttpResponse:
    _require_operator(request)
    context = {"engines": overview.fleet_advice(), "tab": "advice"}
    return render(request, "workers/advice.html", context)
