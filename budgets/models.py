"""Token budgets per tenant, API token or alias, their settled spend per window, and the price
cards (token weights and money per base model) that turn a request's tokens into a charge."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from adapters.models import BaseModel
from tenants.models import Tenant


class Window(models.TextChoices):
    """How long a budget's tokens last before they start again: a day, an ISO week (Monday) or a
    calendar month in the tenant's time zone, or one total that never resets."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    TOTAL = "total"


def default_thresholds() -> list[int]:
    return [50, 80, 100]


class Budget(models.Model):
    """A ceiling in weighted tokens on what one scope of a tenant may spend per window.

    `scope` is `tenant`, `token:<api token id>` or `alias:<alias name>` (budgets.scopes parses
    it); a request is admitted only when its worst case fits every budget that applies to it.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budgets")
    scope = models.CharField(max_length=80)
    tokens = models.PositiveBigIntegerField(validators=[MinValueValidator(1)])
    window = models.CharField(max_length=8, choices=Window.choices, default=Window.MONTH)
    thresholds = models.JSONField(default=default_thresholds)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tenant_id", "scope", "window"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "scope", "window"], name="budget_one_per_scope_window"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.scope}/{self.window}"


class BudgetSpend(models.Model):
    """Settled tokens of one budget in one window: what a Redis that restarted empty is rebuilt
    from. Written before the settle reaches Redis (budgets.settle), so it never holds less than
    Redis's settled count."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="spends")
    window_start = models.DateTimeField()
    tokens = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["budget_id", "-window_start"]
        constraints = [
            models.UniqueConstraint(fields=["budget", "window_start"], name="budgetspend_window")
        ]

    def __str__(self) -> str:
        return f"{self.budget_id}@{self.window_start.isoformat()}: {self.tokens}"


class PriceCard(models.Model):
    """What one base model's tokens weigh against a budget (prompt and completion apart), and
    what a million weighted tokens cost; set by platform admins."""

    base_model = models.OneToOneField(
        BaseModel, on_delete=models.CASCADE, related_name="price_card"
    )
    prompt_weight = models.DecimalField(
        max_digits=8, decimal_places=4, default=Decimal("1"), validators=[MinValueValidator(0)]
    )
    completion_weight = models.DecimalField(
        max_digits=8, decimal_places=4, default=Decimal("1"), validators=[MinValueValidator(0)]
    )
    price_per_million = models.DecimalField(
        max_digits=12, decimal_places=4, default=Decimal("0"), validators=[MinValueValidator(0)]
    )
    currency = models.CharField(max_length=3, default="USD")
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["base_model_id"]

    def __str__(self) -> str:
        return f"{self.base_model_id}: {self.prompt_weight}/{self.completion_weight}"


# Raise requests (budgets/raises.py) and burn-down samples (budgets/alerts.py) live beside.
from budgets.raise_models import BudgetRaiseRequest, BudgetSample  # noqa: E402,F401
