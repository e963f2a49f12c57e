"""What the gateway's tables hold of budgets (read once per rebuild of its tables, never per
request): every budget as a rule, indexed by the scope it applies to, and each base model's
token weights. `charge` turns tokens into what a budget counts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from budgets import clock
from budgets.limits import window_raises
from budgets.models import Budget, PriceCard
from budgets.scopes import ScopeKind, parse_scope
from budgets.windows import Span, window_at

NO_RULES: tuple[BudgetRule, ...] = ()


@dataclass(frozen=True, slots=True)
class BudgetRule:
    id: int
    tenant_id: int
    scope: str
    tokens: int
    window: str
    time_zone: str
    # Approved raises for one window each: ((window start, unix seconds), tokens).
    raises: tuple[tuple[int, int], ...] = ()

    def span(self, at: datetime) -> Span:
        return window_at(self.window, at, self.time_zone)

    def limit(self, span: Span) -> int:
        """The ceiling in `span`: the tokens, or a raise for that window (budgets.limits)."""
        return max([self.tokens, *(t for start, t in self.raises if start == span.key)])


@dataclass(frozen=True, slots=True)
class Weights:
    prompt: float = 1.0
    completion: float = 1.0

    def charge(self, prompt_tokens: int, completion_tokens: int) -> int:
        """Weighted tokens, rounded up (a budget never counts less than was used)."""
        return math.ceil(prompt_tokens * self.prompt + completion_tokens * self.completion)


UNWEIGHTED = Weights()


@dataclass(frozen=True)
class BudgetRules:
    by_tenant: dict[int, tuple[BudgetRule, ...]] = field(default_factory=dict)
    by_token: dict[tuple[int, int], tuple[BudgetRule, ...]] = field(default_factory=dict)
    by_alias: dict[tuple[int, str], tuple[BudgetRule, ...]] = field(default_factory=dict)
    weights: dict[int, Weights] = field(default_factory=dict)  # base model id -> weights

    def applying(
        self, tenant_id: int, token_id: int | None, alias: str | None
    ) -> tuple[BudgetRule, ...]:
        """Every budget a request of `tenant_id` through API token `token_id` (None: not an
        API call) naming `alias` (None: not an alias) counts against."""
        rules = self.by_tenant.get(tenant_id, NO_RULES)
        if token_id is not None:
            rules += self.by_token.get((tenant_id, token_id), NO_RULES)
        if alias is not None:
            rules += self.by_alias.get((tenant_id, alias), NO_RULES)
        return rules

    def weights_for(self, base_model_id: int | None) -> Weights:
        if base_model_id is None:
            return UNWEIGHTED
        return self.weights.get(base_model_id, UNWEIGHTED)


def load_rules() -> BudgetRules:
    """Every budget, its window raises and every price card, in three queries."""
    by_tenant: dict[int, list[BudgetRule]] = {}
    by_token: dict[tuple[int, int], list[BudgetRule]] = {}
    by_alias: dict[tuple[int, str], list[BudgetRule]] = {}
    raises = window_raises(clock.now())
    for budget in Budget.objects.select_related("tenant").order_by("id"):
        scope = parse_scope(budget.scope)
        if scope is None:
            continue
        rule = BudgetRule(
            id=budget.id,
            tenant_id=budget.tenant_id,
            scope=budget.scope,
            tokens=budget.tokens,
            window=budget.window,
            time_zone=budget.tenant.time_zone,
            raises=raises.get(budget.id, ()),
        )
        if scope.kind == ScopeKind.TENANT:
            by_tenant.setdefault(rule.tenant_id, []).append(rule)
        elif scope.kind == ScopeKind.TOKEN and scope.token_id is not None:
            by_token.setdefault((rule.tenant_id, scope.token_id), []).append(rule)
        else:
            by_alias.setdefault((rule.tenant_id, scope.alias), []).append(rule)
    weights = {
        card.base_model_id: Weights(float(card.prompt_weight), float(card.completion_weight))
        for card in PriceCard.objects.all()
    }
    return BudgetRules(
        by_tenant={k: tuple(v) for k, v in by_tenant.items()},
        by_token={k: tuple(v) for k, v in by_token.items()},
        by_alias={k: tuple(v) for k, v in by_alias.items()},
        weights=weights,
    )
