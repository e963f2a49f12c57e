"""The budgets pages: a tenant's (each scope's burn-down this window, what is left, when it resets,
the forecast, the alerts told, raise requests and the owners' form to ask for one) and the
platform's (every tenant's budgets, and the pending raises a platform admin decides)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from budgets import raises
from budgets.page_selectors import budget_views, pending_raises
from budgets.selectors import budget_get, budgets_of, price_cards
from budgets.services import budgets as budget_service
from budgets.services.price_cards import price_card_set
from core.errors import ApplicationError, PermissionDenied
from core.request import PortalRequest
from tenants.access_port import Access
from tenants.models import Tenant
from tenants.pagekit import access_for, page_view, post_int, post_text, render_page, tenant_scope


def _tenant_page(
    request: PortalRequest, access: Access, tenant: Tenant, error: ApplicationError | None = None
) -> HttpResponse:
    views = budget_views(list(budgets_of(tenant=tenant)))
    for view in views:
        view.rights = budget_service.budget_rights(access=access, budget=view.budget)
    return render_page(
        request,
        "budgets/tenant_budgets.html",
        {
            "tenant": tenant,
            "views": views,
            "can_ask": access.tenant_role(tenant) == "owner",
            "can_change": access.may_change_budgets(tenant),
            "can_set_ceiling": budget_service.may_change_scope(
                access=access, tenant=tenant, scope="tenant"
            ),
            "form": request.POST if error else None,
        },
        error=error,
    )


@page_view
def tenant_budgets(request: PortalRequest, tenant: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    if not access.may_view_budgets(found):
        raise PermissionDenied("permission.denied", "Budgets are for the tenant's members.")
    return _tenant_page(request, access, found)


@page_view
@require_POST
def raise_request_add(request: PortalRequest, tenant: str, budget: int) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    access.require_budget_raise_request(found)
    target = budget_get(tenant=found, budget_id=budget)
    try:
        raises.raise_request_create(
            access=access,
            budget=target,
            tokens=post_int(request, "tokens", code="budget_raise.invalid_tokens"),
            duration=post_text(request, "duration", max_length=20),
            reason=post_text(request, "reason"),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _tenant_page(request, access, found, exc)
    messages.success(request, f"Raise of '{target.scope}' asked for; a platform admin decides.")
    return redirect("tenant-budgets", tenant=found.slug)


def _thresholds(request: PortalRequest) -> object:
    raw = post_text(request, "thresholds", max_length=200)
    if not raw:
        return None
    try:
        return [int(part) for part in raw.replace(" ", "").split(",") if part]
    except ValueError:
        return raw  # the service says what is wrong with it


@page_view
@require_POST
def budget_set(request: PortalRequest, tenant: str) -> HttpResponse:
    """POST {scope, tokens, window, thresholds}: a new budget."""
    access, found = tenant_scope(request, tenant)
    access.require_budget_change(found)
    try:
        created = budget_service.budget_create(
            access=access,
            tenant=found,
            scope=post_text(request, "scope", max_length=80),
            tokens=post_int(request, "tokens", code="budget.invalid_tokens"),
            window=post_text(request, "window", max_length=10) or "month",
            thresholds=_thresholds(request),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return _tenant_page(request, access, found, exc)
    messages.success(request, f"Budget '{created.scope}' ({created.window}) set.")
    return redirect("tenant-budgets", tenant=found.slug)


@page_view
@require_POST
def budget_edit(request: PortalRequest, tenant: str, budget: int) -> HttpResponse:
    """POST {tokens?, thresholds?} edits the budget; POST {delete: 1} removes it."""
    access, found = tenant_scope(request, tenant)
    access.require_budget_change(found)
    target = budget_get(tenant=found, budget_id=budget)
    if request.POST.get("delete"):
        budget_service.budget_delete(access=access, budget=target, request_id=request.request_id)
        messages.success(request, f"Budget '{target.scope}' ({target.window}) removed.")
        return redirect("tenant-budgets", tenant=found.slug)
    changes: dict[str, object] = {}
    if request.POST.get("tokens", "").strip():
        changes["tokens"] = post_int(request, "tokens", code="budget.invalid_tokens")
    if request.POST.get("thresholds", "").strip():
        changes["thresholds"] = _thresholds(request)
    try:
        budget_service.budget_update(
            access=access, budget=target, changes=changes, request_id=request.request_id
        )
    except ApplicationError as exc:
        return _tenant_page(request, access, found, exc)
    messages.success(request, f"Budget '{target.scope}' ({target.window}) saved.")
    return redirect("tenant-budgets", tenant=found.slug)


@page_view
@require_POST
def price_card_save(request: PortalRequest) -> HttpResponse:
    """POST {base_model, prompt_weight, completion_weight, price_per_million, currency}."""
    access = access_for(request)
    access.require_price_card_change()
    values = {
        name: request.POST[name].strip()
        for name in ("prompt_weight", "completion_weight", "price_per_million", "currency")
        if request.POST.get(name, "").strip()
    }
    base_model = post_text(request, "base_model", max_length=200)
    try:
        price_card_set(
            access=access, base_model=base_model, values=values, request_id=request.request_id
        )
    except ApplicationError as exc:
        return _platform_page(request, access, exc)
    messages.success(request, f"Price card of '{base_model}' saved.")
    return redirect("platform-budgets")


def _platform_page(
    request: PortalRequest, access: Access, error: ApplicationError | None = None
) -> HttpResponse:
    from adapters.models import BaseModel
    from budgets.models import Budget

    every = list(Budget.objects.select_related("tenant").order_by("tenant__slug", "scope", "id"))
    return render_page(
        request,
        "budgets/platform_budgets.html",
        {
            "pending": [(r, access.may_decide_budget_raise(r)) for r in pending_raises()],
            "views": budget_views(every),
            "cards": price_cards(),
            "base_models": BaseModel.objects.order_by("name").values_list("name", flat=True),
            "form": request.POST if error else None,
        },
        error=error,
    )


@page_view
def platform_budgets(request: PortalRequest) -> HttpResponse:
    access = access_for(request)
    access.require_platform_role("is_platform_admin")
    return _platform_page(request, access)


@page_view
@require_POST
def raise_request_decide(request: PortalRequest, raise_request: int) -> HttpResponse:
    access = access_for(request)
    access.require_platform_role("is_platform_admin")
    found = raises.raise_request_get(access=access, request_id=raise_request)
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        raise ApplicationError("budget_raise.invalid_decision", "Decide approve or reject.")
    decide = raises.raise_request_approve if decision == "approve" else raises.raise_request_reject
    decided = decide(
        access=access,
        raise_request=found,
        comment=post_text(request, "comment"),
        request_id=request.request_id,
    )
    messages.success(
        request,
        f"Raise of {decided.tenant.slug} '{decided.budget.scope}' to {decided.tokens:,} tokens "
        f"{decided.status}.",
    )
    return redirect("platform-budgets")
