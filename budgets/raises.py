"""Raising a budget: a tenant owner asks (the new ceiling, for the rest of the window or for good,
and why); a platform admin who is not the requester approves or rejects. Every step audited.

An approved window raise holds the window it was approved in to the new ceiling and ends with it
(budgets.limits: the window's start names it); a permanent one sets the budget's tokens.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from budgets import clock
from budgets.limits import window_limit
from budgets.models import Budget, Window
from budgets.raise_models import BudgetRaiseRequest, RaiseDuration, RaiseStatus
from budgets.selectors import budget_span
from core.audit import record_event
from core.errors import ApplicationError, Conflict, NotFound
from tenants.access_port import Access

MAX_TOKENS = 10**15
MAX_REASON = 2000


def _describe(request: BudgetRaiseRequest) -> dict[str, object]:
    return {
        "budget": request.budget_id,
        "scope": request.budget.scope,
        "tokens": request.tokens,
        "previous_tokens": request.previous_tokens,
        "duration": request.duration,
        "status": request.status,
    }


def raise_request_create(
    *,
    access: Access,
    budget: Budget,
    tokens: object,
    duration: object,
    reason: object,
    request_id: str = "",
) -> BudgetRaiseRequest:
    access.require_budget_raise_request(budget.tenant)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_TOKENS:
        raise ApplicationError(
            "budget_raise.invalid_tokens",
            f"`tokens` must be a whole number from 1 to {MAX_TOKENS}.",
        )
    if duration not in RaiseDuration.values:
        raise ApplicationError(
            "budget_raise.invalid_duration", "`duration` must be `window` or `permanent`."
        )
    if duration == RaiseDuration.WINDOW and budget.window == Window.TOTAL:
        raise ApplicationError(
            "budget_raise.no_window",
            "A total budget has no window to raise for the rest of: ask for `permanent`.",
        )
    if not isinstance(reason, str) or not reason.strip():
        raise ApplicationError("budget_raise.no_reason", "Say why the budget should be raised.")
    if len(reason) > MAX_REASON:
        raise ApplicationError(
            "budget_raise.reason_too_long", f"`reason` is at most {MAX_REASON} characters."
        )
    now = clock.now()
    current = window_limit(budget, budget_span(budget, now).start)
    if tokens <= current:
        raise ApplicationError(
            "budget_raise.not_a_raise",
            f"The budget holds {current} tokens this window; a raise asks for more.",
        )
    try:
        with transaction.atomic():
            created = BudgetRaiseRequest.objects.create(
                tenant=budget.tenant,
                budget=budget,
                tokens=tokens,
                duration=duration,
                reason=reason.strip(),
                previous_tokens=current,
                requested_by=access.user,
                requested_at=timezone.now(),
            )
            record_event(
                action="budget_raise.request",
                actor=access.user,
                tenant=budget.tenant,
                obj=created,
                after={**_describe(created), "reason": created.reason},
                request_id=request_id,
            )
    except IntegrityError:
        raise Conflict(
            "budget_raise.pending",
            "This budget already has a raise waiting for a platform admin.",
        ) from None
    return created


def _decide(
    *,
    access: Access,
    raise_request: BudgetRaiseRequest,
    approve: bool,
    comment: str,
    request_id: str,
) -> BudgetRaiseRequest:
    access.require_budget_raise_decision(raise_request)
    comment = (comment or "").strip()[:MAX_REASON]
    verb = "approve" if approve else "reject"
    with transaction.atomic():
        locked = (
            BudgetRaiseRequest.objects.select_for_update()
            .select_related("budget", "budget__tenant", "tenant")
            .get(pk=raise_request.pk)
        )
        if locked.status != RaiseStatus.PENDING:
            raise Conflict(
                "budget_raise.decided",
                f"This request was {locked.status} already; nothing to {verb}.",
            )
        budget = Budget.objects.select_for_update().get(pk=locked.budget_id)
        before = _describe(locked)
        now = timezone.now()
        locked.status = RaiseStatus.APPROVED if approve else RaiseStatus.REJECTED
        locked.decided_by, locked.decided_at, locked.comment = access.user, now, comment
        budget_before = {"tokens": budget.tokens}
        if approve and locked.duration == RaiseDuration.WINDOW:
            span = budget_span(budget, clock.now())
            locked.window_start, locked.window_end = span.start, span.end
        locked.save()
        if approve and locked.duration == RaiseDuration.PERMANENT and locked.tokens > budget.tokens:
            budget.tokens = locked.tokens
            budget.save(update_fields=["tokens"])
        after = {**_describe(locked), "comment": comment}
        if locked.window_end is not None:
            after["until"] = locked.window_end
        record_event(
            action=f"budget_raise.{verb}",
            actor=access.user,
            tenant=locked.tenant,
            obj=locked,
            before={**before, "budget": budget_before},
            after={**after, "budget": {"tokens": budget.tokens}},
            request_id=request_id,
        )
    return locked


def raise_request_approve(
    *, access: Access, raise_request: BudgetRaiseRequest, comment: str = "", request_id: str = ""
) -> BudgetRaiseRequest:
    return _decide(
        access=access,
        raise_request=raise_request,
        approve=True,
        comment=comment,
        request_id=request_id,
    )


def raise_request_reject(
    *, access: Access, raise_request: BudgetRaiseRequest, comment: str = "", request_id: str = ""
) -> BudgetRaiseRequest:
    return _decide(
        access=access,
        raise_request=raise_request,
        approve=False,
        comment=comment,
        request_id=request_id,
    )


# --- reads ---


def raise_requests_of(*, budget: Budget) -> QuerySet[BudgetRaiseRequest]:
    return BudgetRaiseRequest.objects.filter(budget=budget).select_related(
        "budget", "requested_by", "decided_by"
    )


def raise_requests_visible(*, access: Access) -> QuerySet[BudgetRaiseRequest]:
    """Every tenant's for platform admins (they decide them), else the tenants the caller's
    budgets are visible in."""
    qs = BudgetRaiseRequest.objects.select_related("budget", "tenant", "requested_by", "decided_by")
    if access.is_platform_admin and access.bound_tenant_id is None:
        return qs
    visible = [t.pk for t in access.visible_tenants() if access.may_view_budgets(t)]
    return qs.filter(tenant_id__in=visible)


def raise_request_get(*, access: Access, request_id: str | int) -> BudgetRaiseRequest:
    """One request the caller may see; another tenant's is not found."""
    try:
        number = int(request_id)
    except (TypeError, ValueError):
        number = -1
    found = raise_requests_visible(access=access).filter(pk=number).first()
    if found is None:
        raise NotFound("budget_raise.not_found", f"No budget raise request {request_id}.")
    return found
