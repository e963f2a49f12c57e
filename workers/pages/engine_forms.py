"""Registering an engine and changing its settings from the fleet pages, read through the API's
serializers and written by workers.services.registry, which decides who may (placing or moving an
engine is a platform admin's; its limits and pool an operator's)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.errors import ApplicationError
from core.request import PortalRequest
from tenants.pageforms import form_data
from tenants.pagekit import access_for, page_view
from workers import serializers as s
from workers.page_selectors import engines as fleet
from workers.pages.engines import _engine, _engine_page, _require_operator
from workers.services.registry import engine_create, engine_update

# What the settings form sends; state moves only through drain/undrain, never as a field.
SETTINGS_FIELDS = (
    "pool",
    "served_model_name",
    "max_loras",
    "max_cpu_loras",
    "max_lora_rank",
    "max_num_seqs",
    "required",
    "url",
    "adapter_root",
)


def _posted(request: PortalRequest, names: tuple[str, ...]) -> QueryDict:
    """Only the fields the form sent, so a partial update leaves the others alone."""
    posted = QueryDict(mutable=True)
    for name in names:
        if name in request.POST:
            posted[name] = request.POST[name]
    return posted


@page_view
@require_POST
def engine_new(request: PortalRequest) -> HttpResponse:
    _require_operator(request)
    access = access_for(request)
    try:
        fields = form_data(s.EngineSerializer, request.POST, code="engine.invalid")
        engine = engine_create(access=access, fields=fields, request_id=request.request_id)
    except ApplicationError as exc:
        context = {"slots": fleet.all_engine_slots(), "error": exc, "form": request.POST}
        return render(request, "workers/engines.html", context, status=exc.status)
    messages.success(request, f"Engine '{engine.name}' registered; the prober checks it next.")
    return redirect("fleet-engine", engine=engine.name)


@page_view
@require_POST
def engine_edit(request: PortalRequest, engine: str) -> HttpResponse:
    found = _engine(request, engine)
    try:
        changes = form_data(
            s.EngineUpdateSerializer,
            _posted(request, SETTINGS_FIELDS),
            code="engine.invalid",
            instance=found,
            partial=True,
        )
        found = engine_update(
            access=access_for(request), engine=found, changes=changes, request_id=request.request_id
        )
    except ApplicationError as exc:
        return _engine_page(request, found, exc)
    messages.success(request, f"Settings of '{found.name}' saved.")
    return redirect("fleet-engine", engine=found.name)
