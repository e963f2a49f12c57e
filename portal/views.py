"""The web shell: health, dashboard."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from portal.health import cached_health_report, health_report, redact_report
from tenants.access import AccessContext


async def healthz(request: HttpRequest) -> JsonResponse:
    """Open to probes, which get a recent result, redacted; operators get a fresh check and the
    reasons (they can name internal hosts)."""
    user = await request.auser()
    if user.is_authenticated and await sync_to_async(_sees_engines)(user):
        healthy, report = await health_report()
    else:
        healthy, cached = await cached_health_report()
        report = redact_report(cached)
    return JsonResponse(report, status=200 if healthy else 503)


def _sees_engines(user) -> bool:
    return AccessContext.for_user(user).sees_engines


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    from portal.selectors import dashboard_context

    return render(request, "portal/dashboard.html", dashboard_context(user=request.user))
