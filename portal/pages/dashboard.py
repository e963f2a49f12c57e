"""The dashboard: engines, residency, hit ratio, load latency, TTFT and cold requests of what the
signed-in user may see."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    from portal.selectors import dashboard_context

    return render(request, "portal/dashboard.html", dashboard_context(user=request.user))
