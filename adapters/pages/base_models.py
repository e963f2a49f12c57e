"""The platform admins' base models page: what adapters may target, and registering one."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect

from adapters import serializers as s
from adapters.models import BaseModel
from adapters.services.registry import base_model_register
from core.errors import ApplicationError
from core.json_depth import loads_bounded
from core.request import PortalRequest
from tenants.pageforms import form_data, require_platform_role
from tenants.pagekit import access_for, page_view, post_text, render_page

MAX_CONFIG_CHARS = 64 * 1024
# A model's config.json nests 2-4 levels; 64 KiB of `[` was a RecursionError, a 500.
MAX_CONFIG_DEPTH = 32


def _hf_config(request: PortalRequest) -> dict:
    raw = request.POST.get("hf_config", "")
    if len(raw) > MAX_CONFIG_CHARS:
        raise ApplicationError(
            "base_model.config_invalid",
            f"config.json is longer than {MAX_CONFIG_CHARS} characters.",
        )
    try:
        parsed = loads_bounded(raw, MAX_CONFIG_DEPTH)
    except ValueError as exc:
        raise ApplicationError(
            "base_model.config_invalid", f"Paste the model's config.json: {exc}."
        ) from None
    if not isinstance(parsed, dict):
        raise ApplicationError("base_model.config_invalid", "config.json must be a JSON object.")
    return parsed


def _page(request: PortalRequest, error: ApplicationError | None = None) -> HttpResponse:
    return render_page(
        request,
        "adapters/base_models.html",
        {
            "base_models": BaseModel.objects.order_by("name"),
            "form": request.POST if error else None,
        },
        error=error,
    )


@page_view
def base_models(request: PortalRequest) -> HttpResponse:
    """GET: every base model and its LoRA-targetable modules; POST: register one."""
    require_platform_role(access_for(request), "is_platform_admin", "manage base models")
    if request.method != "POST":
        return _page(request)
    try:
        fields = {
            "name": post_text(request, "name", max_length=100),
            "source": post_text(request, "source", max_length=500),
            "hf_config": _hf_config(request),
        }
        if post_text(request, "revision"):  # optional: left out, as an API caller would
            fields["revision"] = post_text(request, "revision", max_length=100)
        data = form_data(s.BaseModelCreateSerializer, fields, code="base_model.invalid")
        created = base_model_register(
            access=access_for(request), request_id=request.request_id, **data
        )
    except ApplicationError as exc:
        return _page(request, exc)
    messages.success(request, f"Base model '{created.name}' registered.")
    return redirect("platform-base-models")
