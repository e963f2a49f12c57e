"""Writes of price cards: one per base model, set by platform admins, audited."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.utils import timezone

from adapters.models import BaseModel
from budgets.models import PriceCard
from core.audit import record_event
from core.errors import ApplicationError
from tenants.access_port import Access

LIMITS = {
    "prompt_weight": Decimal("1000"),
    "completion_weight": Decimal("1000"),
    "price_per_million": Decimal("100000000"),
}


def describe(card: PriceCard) -> dict[str, Any]:
    return {
        "base_model": card.base_model.name,
        "prompt_weight": str(card.prompt_weight),
        "completion_weight": str(card.completion_weight),
        "price_per_million": str(card.price_per_million),
        "currency": card.currency,
    }


def _number(name: str, value: object) -> Decimal:
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        number = Decimal("NaN")
    if isinstance(value, bool) or not number.is_finite() or not 0 <= number <= LIMITS[name]:
        raise ApplicationError(
            "price_card.invalid", f"`{name}` must be a number from 0 to {LIMITS[name]}."
        )
    return number.quantize(Decimal("0.0001"))


def price_card_set(
    *, access: Access, base_model: str, values: dict[str, Any], request_id: str = ""
) -> PriceCard:
    """Create or change the card of `base_model`: the fields given, the others kept."""
    access.require_price_card_change()
    model = (
        BaseModel.objects.filter(name=base_model).first() if isinstance(base_model, str) else None
    )
    if model is None:
        raise ApplicationError(
            "price_card.unknown_base_model", f"No base model named '{base_model}'."
        )
    card = PriceCard.objects.filter(base_model=model).first() or PriceCard(base_model=model)
    before = describe(card) if card.pk else None
    for name in LIMITS:
        if name in values:
            setattr(card, name, _number(name, values[name]))
    if "currency" in values:
        currency = values["currency"]
        if not isinstance(currency, str) or len(currency) != 3 or not currency.isalpha():
            raise ApplicationError("price_card.invalid", "`currency` must be a 3-letter code.")
        card.currency = currency.upper()
    card.updated_by = access.user if getattr(access.user, "is_authenticated", False) else None
    card.updated_at = timezone.now()
    with transaction.atomic():
        card.save()
        record_event(
            action="price_card.set",
            actor=access.user,
            obj=card,
            object_id=model.name,
            before=before,
            after=describe(card),
            request_id=request_id,
        )
    return card
