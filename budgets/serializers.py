"""The budgets' REST shapes: a budget with where it stands this window, and a price card."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from budgets.models import Budget, PriceCard
from budgets.money import BudgetMoney
from budgets.selectors import BudgetStatus


class BudgetInputSerializer(serializers.Serializer):
    """For the schema only: the service validates (budgets.services.budgets)."""

    scope = serializers.CharField(help_text="`tenant`, `token:<token id>` or `alias:<name>`")
    tokens = serializers.IntegerField(min_value=1)
    window = serializers.ChoiceField(choices=["day", "week", "month", "total"], default="month")
    thresholds = serializers.ListField(child=serializers.IntegerField(), required=False)


class BudgetMoneySerializer(serializers.Serializer):
    """A budget's figures in money (budgets.money)."""

    currency = serializers.CharField()
    price_per_million = serializers.CharField(help_text="per million weighted tokens")
    prompt_weight = serializers.CharField()
    completion_weight = serializers.CharField()
    limit = serializers.FloatField()
    used = serializers.FloatField()
    reserved = serializers.FloatField()
    remaining = serializers.FloatField()


class BudgetSerializer(serializers.ModelSerializer):
    created_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    used = serializers.SerializerMethodField()
    reserved = serializers.SerializerMethodField()
    remaining = serializers.SerializerMethodField()
    window_start = serializers.SerializerMethodField()
    resets_at = serializers.SerializerMethodField()
    forecast_exhausted_at = serializers.SerializerMethodField()
    money = serializers.SerializerMethodField(
        help_text="The same figures in money, from the price card of the base model the scope "
        "reaches (per million weighted tokens), rounded to cents; null without a price card."
    )

    class Meta:
        model = Budget
        fields = [
            "id",
            "scope",
            "tokens",
            "window",
            "thresholds",
            "used",
            "reserved",
            "remaining",
            "window_start",
            "resets_at",
            "forecast_exhausted_at",
            "money",
            "created_by",
            "created_at",
        ]

    def _status(self, budget: Budget) -> BudgetStatus:
        statuses: dict[int, BudgetStatus] = self.context["statuses"]
        return statuses[budget.id]

    def get_used(self, budget: Budget) -> int:
        return self._status(budget).used

    def get_reserved(self, budget: Budget) -> int:
        return self._status(budget).reserved

    def get_remaining(self, budget: Budget) -> int:
        return self._status(budget).remaining

    def get_window_start(self, budget: Budget) -> Any:
        return serializers.DateTimeField().to_representation(self._status(budget).window_start)

    def get_resets_at(self, budget: Budget) -> Any:
        at = self._status(budget).resets_at
        return serializers.DateTimeField().to_representation(at) if at else None

    def get_forecast_exhausted_at(self, budget: Budget) -> Any:
        at = self._status(budget).forecast_exhausted_at
        return serializers.DateTimeField().to_representation(at) if at else None

    @extend_schema_field(BudgetMoneySerializer(allow_null=True))
    def get_money(self, budget: Budget) -> dict[str, Any] | None:
        money: dict[int, BudgetMoney | None] = self.context.get("money", {})
        found = money.get(budget.id)
        return None if found is None else found.as_dict()


class PriceCardSerializer(serializers.ModelSerializer):
    base_model: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    updated_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = PriceCard
        fields = [
            "base_model",
            "prompt_weight",
            "completion_weight",
            "price_per_million",
            "currency",
            "updated_by",
            "updated_at",
        ]
