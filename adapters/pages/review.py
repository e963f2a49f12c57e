"""The reviewer queue: validated versions across tenants, approved or rejected in place."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from adapters.approval_checks import ApprovalOverride
from adapters.models import AdapterVersion, VersionStatus
from adapters.page_panels import queue_notes
from adapters.pages.lookup import version_in_scope
from adapters.selectors import versions_visible
from adapters.services.lifecycle import version_approve, version_reject
from core.errors import ApplicationError
from core.request import PortalRequest
from tenants.access_port import Access
from tenants.pagekit import access_for, is_htmx, page_view, post_text, render_page

QUEUE_LIMIT = 200


def _require_reviewer(access: Access) -> None:
    access.require_reviewer("open the review queue")


def _queue_page(
    request: PortalRequest, access: Access, error: ApplicationError | None = None
) -> HttpResponse:
    queue = (
        versions_visible(access=access)
        .filter(status=VersionStatus.VALIDATED)
        .select_related("adapter__base_model")
        .order_by("created_at", "id")[:QUEUE_LIMIT]
    )
    versions = list(queue)
    notes = queue_notes(versions=versions)  # what the apps above say (the eval gate's state)
    for version in versions:
        version.queue_notes = notes.get(version.pk, [])  # type: ignore[attr-defined]
    return render_page(request, "adapters/review_queue.html", {"queue": versions}, error=error)


@page_view
def review_queue(request: PortalRequest) -> HttpResponse:
    access = access_for(request)
    _require_reviewer(access)
    return _queue_page(request, access)


def _answer(
    request: PortalRequest, version: AdapterVersion, done: str, error: ApplicationError | None
) -> HttpResponse:
    """HTMX swaps the row (with the error in it); a plain form gets the queue page back."""
    if is_htmx(request):
        return render(
            request,
            "adapters/_review_row.html",
            {"version": version, "done": done, "error": error},
            status=error.status if error else 200,
        )
    if error is not None:
        return _queue_page(request, access_for(request), error)
    messages.success(request, f"{version.tenant.slug}/{version} {done}.")
    return redirect("review-queue")


@page_view
@require_POST
def review_approve(request: PortalRequest, tenant: str, adapter: str, number: int) -> HttpResponse:
    scope, version = version_in_scope(request, tenant, adapter, number)
    _require_reviewer(scope.access)
    try:
        version = version_approve(
            version=version,
            comment=post_text(request, "comment"),
            access=scope.access,
            request_id=request.request_id,
            override=ApprovalOverride(post_text(request, "reason"))
            if request.POST.get("override_eval_gate")
            else None,
        )
    except ApplicationError as exc:
        return _answer(request, version, "", exc)
    return _answer(request, version, "approved", None)


@page_view
@require_POST
def review_reject(request: PortalRequest, tenant: str, adapter: str, number: int) -> HttpResponse:
    scope, version = version_in_scope(request, tenant, adapter, number)
    _require_reviewer(scope.access)
    try:
        version = version_reject(
            version=version,
            reason=post_text(request, "reason"),
            access=scope.access,
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _answer(request, version, "", exc)
    return _answer(request, version, "rejected", None)
