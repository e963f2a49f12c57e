"""What every server-rendered page shares: login, the AccessContext, domain errors as pages.

A page view raises ApplicationError like a service does; `page_view` renders it with its status
(404 for objects out of reach, 403 for roles without the right), as a full page or, for an HTMX
request, as a fragment the caller swaps in.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.errors import ApplicationError
from tenants.access_port import Access, access_for_request


def is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def access_for(request: HttpRequest) -> Access:
    return access_for_request(request)


def tenant_scope(request: HttpRequest, slug: str, capability: str = "view") -> tuple[Access, Any]:
    """The caller's access and the tenant `slug` names, once the caller may do `capability`
    there (another tenant's slug: a 404, as everywhere)."""
    access = access_for(request)
    tenant = access.get_tenant(slug)
    access.require_tenant(tenant, capability)
    return access, tenant


def render_error(request: HttpRequest, exc: ApplicationError) -> HttpResponse:
    template = "portal/_error.html" if is_htmx(request) else "portal/error.html"
    return render(request, template, {"error": exc}, status=exc.status)


def render_page(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    error: ApplicationError | None = None,
) -> HttpResponse:
    """Render a page, with a refused action's error shown on it and answered with its status."""
    return render(
        request, template, {**context, "error": error}, status=error.status if error else 200
    )


def page_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except ApplicationError as exc:
            return render_error(request, exc)

    return wrapper


def post_text(request: HttpRequest, name: str, *, max_length: int = 2000) -> str:
    return request.POST.get(name, "").strip()[:max_length]


def post_int(
    request: HttpRequest, name: str, *, code: str, default: int | None = None
) -> int | None:
    raw = request.POST.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApplicationError(
            code, f"'{name}' must be a whole number, not '{raw[:20]}'."
        ) from None
