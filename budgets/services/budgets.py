"""Writes of budgets: set, edit and remove, each checked against the access rules, validated
with a clear code, and audited in the same transaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from adapters.models import Alias
from budgets.models import Budget, Window
from budgets.scopes import ScopeKind, parse_scope
from core.audit import record_event
from core.errors import ApplicationError
from tenants.access_port import Access
from tenants.models import ApiToken, Tenant

MAX_THRESHOLDS = 10
MAX_TOKENS = 10**15


@dataclass(frozen=True, slots=True)
class BudgetRights:
    """What the caller may do to one budget, from the same checks its writes make: what a page
    offers (a field or button it shows can be used)."""

    change: bool  # its thresholds (and lowering its tokens)
    set_tokens: bool  # its tokens to any number, a raise included
    remove: bool


def require_scope_change(access: Access, tenant: Tenant, scope: str) -> None:
    """Creating, removing or raising a budget of `scope`: the tenant's owners and platform
    admins; for the tenant scope (the ceiling on all the tenant spends) platform admins only
    (adapters/access.py, require_tenant_ceiling_change)."""
    access.require_budget_change(tenant)
    if scope == ScopeKind.TENANT:
        access.require_tenant_ceiling_change(tenant)


def may_change_scope(*, access: Access, tenant: Tenant, scope: str) -> bool:
    """require_scope_change as a yes/no, from the access rules' own `may_` answers."""
    return access.may_change_budgets(tenant) and (
        scope != ScopeKind.TENANT or access.may_change_tenant_ceiling(tenant)
    )


def budget_rights(*, access: Access, budget: Budget) -> BudgetRights:
    scoped = may_change_scope(access=access, tenant=budget.tenant, scope=budget.scope)
    return BudgetRights(
        change=access.may_change_budgets(budget.tenant), set_tokens=scoped, remove=scoped
    )


def describe(budget: Budget) -> dict[str, Any]:
    return {
        "scope": budget.scope,
        "tokens": budget.tokens,
        "window": budget.window,
        "thresholds": list(budget.thresholds),
    }


def clean_scope(tenant: Tenant, scope: object) -> str:
    """The scope as stored; 400 when it is malformed or names a token or alias this tenant does
    not have (another tenant's is not told apart from none)."""
    parsed = parse_scope(scope) if isinstance(scope, str) else None
    if parsed is None:
        raise ApplicationError(
            "budget.invalid_scope",
            "`scope` must be `tenant`, `token:<token id>` or `alias:<alias name>`.",
        )
    if parsed.kind == ScopeKind.TOKEN and not _tenant_has_token(tenant, parsed.token_id or 0):
        raise ApplicationError(
            "budget.unknown_token",
            f"Tenant '{tenant.slug}' has no API token {parsed.token_id} bound to it.",
        )
    if parsed.kind == ScopeKind.ALIAS and not _tenant_has_alias(tenant, parsed.alias):
        raise ApplicationError(
            "budget.unknown_alias", f"Tenant '{tenant.slug}' has no alias '{parsed.alias}'."
        )
    return str(parsed)


def _tenant_has_token(tenant: Tenant, token_id: int) -> bool:
    return ApiToken.objects.filter(pk=token_id, tenant=tenant).exists()


def _tenant_has_alias(tenant: Tenant, name: str) -> bool:
    return Alias.objects.filter(tenant=tenant, name=name).exists()


def clean_tokens(tokens: object) -> int:
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_TOKENS:
        raise ApplicationError(
            "budget.invalid_tokens", f"`tokens` must be a whole number from 1 to {MAX_TOKENS}."
        )
    return tokens


def clean_window(window: object) -> str:
    if window not in Window.values:
        raise ApplicationError(
            "budget.invalid_window", f"`window` must be one of {', '.join(Window.values)}."
        )
    return str(window)


def clean_thresholds(thresholds: object) -> list[int]:
    values = thresholds if isinstance(thresholds, list) else []
    numbers = [
        t for t in values if isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= 100
    ]
    ok = (
        isinstance(thresholds, list)
        and len(values) <= MAX_THRESHOLDS
        and len(numbers) == len(values)
        and len(set(numbers)) == len(numbers)
    )
    if not ok:
        raise ApplicationError(
            "budget.invalid_thresholds",
            f"`thresholds` must be a list of at most {MAX_THRESHOLDS} different percentages "
            "from 1 to 100.",
        )
    return sorted(numbers)


def _save(budget: Budget, tenant: Tenant) -> None:
    try:
        with transaction.atomic():
            budget.save()
    except IntegrityError:
        raise ApplicationError(
            "budget.duplicate",
            f"Tenant '{tenant.slug}' already has a {budget.window} budget for scope "
            f"'{budget.scope}'; edit that one.",
        ) from None


def budget_create(
    *,
    access: Access,
    tenant: Tenant,
    scope: object,
    tokens: object,
    window: object = Window.MONTH,
    thresholds: object = None,
    request_id: str = "",
) -> Budget:
    access.require_budget_change(tenant)
    budget = Budget(
        tenant=tenant,
        scope=clean_scope(tenant, scope),
        tokens=clean_tokens(tokens),
        window=clean_window(window),
        thresholds=clean_thresholds([50, 80, 100] if thresholds is None else thresholds),
        created_by=access.user if getattr(access.user, "is_authenticated", False) else None,
    )
    require_scope_change(access, tenant, budget.scope)
    with transaction.atomic():
        _save(budget, tenant)
        record_event(
            action="budget.create",
            actor=access.user,
            tenant=tenant,
            obj=budget,
            after=describe(budget),
            request_id=request_id,
        )
    return budget


def budget_update(
    *, access: Access, budget: Budget, changes: dict[str, Any], request_id: str = ""
) -> Budget:
    """Edit any of scope, tokens, window, thresholds (the others stay). A tenant-scope budget's
    owners may lower its tokens and change its thresholds; the rest of its changes (a raise,
    another window, another scope, a budget moved onto the tenant scope) are a platform admin's."""
    tenant = budget.tenant
    access.require_budget_change(tenant)
    unknown = set(changes) - {"scope", "tokens", "window", "thresholds"}
    if unknown:
        raise ApplicationError(
            "budget.unknown_field", f"Unknown field(s): {', '.join(sorted(unknown))}."
        )
    before = describe(budget)
    scope = clean_scope(tenant, changes["scope"]) if "scope" in changes else budget.scope
    tokens = clean_tokens(changes["tokens"]) if "tokens" in changes else budget.tokens
    window = clean_window(changes["window"]) if "window" in changes else budget.window
    if ScopeKind.TENANT in (budget.scope, scope):
        lowered = (
            budget.scope == scope == ScopeKind.TENANT
            and window == budget.window
            and tokens <= budget.tokens
        )
        if not lowered:  # a window of another length, or another scope, is no mere lowering
            require_scope_change(access, tenant, ScopeKind.TENANT)
    budget.scope, budget.tokens, budget.window = scope, tokens, window
    if "thresholds" in changes:
        budget.thresholds = clean_thresholds(changes["thresholds"])
    with transaction.atomic():
        _save(budget, tenant)
        record_event(
            action="budget.update",
            actor=access.user,
            tenant=tenant,
            obj=budget,
            before=before,
            after=describe(budget),
            request_id=request_id,
        )
    return budget


def budget_delete(*, access: Access, budget: Budget, request_id: str = "") -> None:
    require_scope_change(access, budget.tenant, budget.scope)
    with transaction.atomic():
        record_event(
            action="budget.delete",
            actor=access.user,
            tenant=budget.tenant,
            obj=budget,
            before=describe(budget),
            request_id=request_id,
        )
        budget.delete()
