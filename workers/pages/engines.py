"""Operator pages for the fleet: the engines list, one engine (residency with pin/unpin/warm/evict,
drain/undrain/reconcile, alarms, advice, launch command, actions, warm-up entries), and the alarm
banner every operator page loads. Operators and platform admins only; every action is a service
call (workers.services.operator, workers.services.engines), POST only."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.errors import ApplicationError, NotFound, PermissionDenied
from core.request import PortalRequest
from tenants.pagekit import access_for, is_htmx, page_view, post_text, render_page
from workers.alarms import open_alarms
from workers.models import Engine
from workers.page_selectors import engines as fleet
from workers.selectors import engine_get, version_from_label
from workers.services.engines import engine_operator_transition, engine_request_reconcile
from workers.services.operator import operator_act

VERSION_VERBS = ("pin", "unpin", "warm", "evict")
ENGINE_VERBS = ("drain", "undrain")


def _require_operator(request: HttpRequest) -> None:
    # Checked before any lookup: a non-operator learns nothing, not even which engines exist.
    if not access_for(request).sees_engines:
        raise PermissionDenied(
            "fleet.not_operator", "Only operators and platform admins may open the fleet pages."
        )


def _engine(request: HttpRequest, name: str) -> Engine:
    _require_operator(request)
    return engine_get(name)


@page_view
def engine_list(request: PortalRequest) -> HttpResponse:
    _require_operator(request)
    return render(request, "workers/engines.html", {"slots": fleet.all_engine_slots()})


def _engine_context(engine: Engine) -> dict[str, Any]:
    return {
        "engine": engine,
        "slots": fleet.engine_slots([engine])[0],
        "residencies": fleet.residency_views(engine),
        "alarms": list(open_alarms(engine)),
        "actions": fleet.recent_actions(engine),
        "warmups": fleet.warmup_entries(engine),
        "class_loads": fleet.class_loads(engine),
        **fleet.engine_advice_and_launch(engine),
    }


def _engine_page(
    request: PortalRequest, engine: Engine, error: ApplicationError | None = None
) -> HttpResponse:
    return render_page(request, "workers/engine_detail.html", _engine_context(engine), error=error)


@page_view
def engine_detail(request: PortalRequest, engine: str) -> HttpResponse:
    return _engine_page(request, _engine(request, engine))


def _version_answer(
    request: PortalRequest,
    engine: Engine,
    version: Any,
    done: str,
    error: ApplicationError | None,
) -> HttpResponse:
    """HTMX gets the row re-rendered (with the refusal in it); a plain form the engine page."""
    if is_htmx(request):
        view = fleet.residency_view(engine, version)
        status = error.status if error else 200
        if view is None:  # refused before the version ever had a row here
            return render(request, "portal/_error.html", {"error": error}, status=status)
        context = {"engine": engine, "r": view, "error": error, "done": done}
        return render(request, "workers/_residency_row.html", context, status=status)
    if error is not None:
        return _engine_page(request, engine, error)
    messages.success(request, f"{fleet.version_label(version)}: {done}.")
    return redirect("fleet-engine", engine=engine.name)


@page_view
@require_POST
def version_act(request: PortalRequest, engine: str, verb: str) -> HttpResponse:
    found = _engine(request, engine)
    if verb not in VERSION_VERBS:
        raise NotFound("fleet.bad_verb", f"Unknown action '{verb}'.")
    try:
        version = version_from_label(post_text(request, "version", max_length=200))
    except ApplicationError as exc:
        if is_htmx(request):
            raise
        return _engine_page(request, found, exc)
    try:
        row = operator_act(
            engine=found,
            version=version,
            verb=verb,
            access=access_for(request),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _version_answer(request, found, version, "", exc)
    return _version_answer(
        request, found, version, f"{verb} requested, desired {row.desired_state}", None
    )


@page_view
@require_POST
def engine_state(request: PortalRequest, engine: str, verb: str) -> HttpResponse:
    found = _engine(request, engine)
    if verb not in ENGINE_VERBS:
        raise NotFound("fleet.bad_verb", f"Unknown action '{verb}'.")
    try:
        found = engine_operator_transition(
            engine=found, verb=verb, access=access_for(request), request_id=request.request_id
        )
    except ApplicationError as exc:
        return _engine_page(request, found, exc)
    messages.success(request, f"Engine '{found.name}' is {found.state}.")
    return redirect("fleet-engine", engine=found.name)


@page_view
@require_POST
def engine_reconcile(request: PortalRequest, engine: str) -> HttpResponse:
    found = _engine(request, engine)
    engine_request_reconcile(
        engine=found, access=access_for(request), request_id=request.request_id
    )
    messages.success(request, f"A converge pass on '{found.name}' is queued.")
    return redirect("fleet-engine", engine=found.name)


@page_view
def alarm_banner(request: PortalRequest) -> HttpResponse:
    """The fragment the base layout loads (and refreshes) on operators' pages."""
    _require_operator(request)
    return render(request, "workers/_alarm_banner.html", fleet.alarm_banner())
