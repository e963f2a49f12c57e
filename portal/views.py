"""The web shell: health, dashboard."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from portal.health import health_report


async def healthz(request: HttpRequest) -> JsonResponse:
    healthy, report = await health_report()
    return JsonResponse(report, status=200 if healthy else 503)


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    from portal.selectors import dashboard_context

    return render(request, "portal/dashboard.html", dashboard_context(user=request.user))
