"""Money beside a budget's tokens: its weighted tokens at the price card of the base model its
scope reaches (a price per million weighted tokens), rounded as the cost view rounds money.
Nothing when that base model has no price card, or when the scope reaches base models priced
differently (one figure would be wrong for some of its tokens)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from adapters.models import Adapter, AliasTarget
from budgets.models import Budget, PriceCard
from budgets.scopes import ScopeKind, parse_scope
from budgets.selectors import BudgetStatus

MILLION = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class BudgetMoney:
    currency: str
    price_per_million: Decimal  # per million weighted tokens
    prompt_weight: Decimal
    completion_weight: Decimal
    limit: float  # this window's ceiling (a raise for it included)
    used: float
    reserved: float
    remaining: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "currency": self.currency,
            "price_per_million": str(self.price_per_million),
            "prompt_weight": str(self.prompt_weight),
            "completion_weight": str(self.completion_weight),
            "limit": self.limit,
            "used": self.used,
            "reserved": self.reserved,
            "remaining": self.remaining,
        }


def money_of_budgets(
    budgets: list[Budget], statuses: dict[int, BudgetStatus]
) -> dict[int, BudgetMoney | None]:
    """Each budget's money this window (three queries, however many budgets)."""
    if not budgets:
        return {}
    tenant_ids = {b.tenant_id for b in budgets}
    by_tenant: dict[int, set[int]] = defaultdict(set)
    for tenant_id, base_id in Adapter.objects.filter(tenant_id__in=tenant_ids).values_list(
        "tenant_id", "base_model_id"
    ):
        by_tenant[tenant_id].add(base_id)
    by_alias: dict[tuple[int, str], set[int]] = defaultdict(set)
    for tenant_id, name, base_id in AliasTarget.objects.filter(
        alias__tenant_id__in=tenant_ids
    ).values_list("alias__tenant_id", "alias__name", "version__adapter__base_model_id"):
        by_alias[(tenant_id, name)].add(base_id)
    cards = {card.base_model_id: card for card in PriceCard.objects.all()}
    out: dict[int, BudgetMoney | None] = {}
    for budget in budgets:
        parsed = parse_scope(budget.scope)
        if parsed is not None and parsed.kind == ScopeKind.ALIAS:
            base_ids = by_alias[(budget.tenant_id, parsed.alias)]
        else:
            base_ids = by_tenant[budget.tenant_id]
        card = _one_price(base_ids, cards)
        out[budget.id] = None if card is None else _money(card, statuses[budget.id])
    return out


def _one_price(base_ids: set[int], cards: dict[int, PriceCard]) -> PriceCard | None:
    """The price card every one of `base_ids` has, alike (None: one has none, or they differ)."""
    found = [cards.get(base_id) for base_id in base_ids]
    if not found or any(card is None for card in found):
        return None
    priced = [card for card in found if card is not None]
    prices = {
        (c.price_per_million, c.currency, c.prompt_weight, c.completion_weight) for c in priced
    }
    return priced[0] if len(prices) == 1 else None


def _money(card: PriceCard, status: BudgetStatus) -> BudgetMoney:
    def cost(tokens: int) -> float:
        return round(float(Decimal(tokens) * card.price_per_million / MILLION), 2)

    return BudgetMoney(
        currency=card.currency,
        price_per_million=card.price_per_million,
        prompt_weight=card.prompt_weight,
        completion_weight=card.completion_weight,
        limit=cost(status.limit),
        used=cost(status.used),
        reserved=cost(status.reserved),
        remaining=cost(status.remaining),
    )
