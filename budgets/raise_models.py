"""Raise requests and burn-down samples of budgets (app label `budgets`). A raise: a tenant owner
asks, a platform admin who is not the requester decides; an approved raise for the rest of the
window holds until its end."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class RaiseDuration(models.TextChoices):
    WINDOW = "window"  # the rest of the window it is approved in
    PERMANENT = "permanent"  # the budget's tokens from now on


class RaiseStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class BudgetRaiseRequest(models.Model):
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="budget_raise_requests"
    )
    budget = models.ForeignKey(
        "budgets.Budget", on_delete=models.CASCADE, related_name="raise_requests"
    )
    tokens = models.PositiveBigIntegerField()  # the ceiling asked for
    duration = models.CharField(max_length=10, choices=RaiseDuration.choices)
    reason = models.TextField(max_length=2000)
    previous_tokens = models.PositiveBigIntegerField()  # the ceiling when asked
    status = models.CharField(
        max_length=10, choices=RaiseStatus.choices, default=RaiseStatus.PENDING
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    requested_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(max_length=2000, blank=True, default="")
    # An approved window raise: the window it holds in ([start, end), UTC).
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "budgets"
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget"],
                condition=Q(status="pending"),
                name="budgetraise_one_pending",
            )
        ]
        indexes = [models.Index(fields=["status", "window_end"], name="budgetraise_active")]

    def __str__(self) -> str:
        return f"{self.budget_id}: {self.previous_tokens}->{self.tokens} ({self.status})"


class BudgetSample(models.Model):
    """Where a budget stood at one moment of a window (the alert loop writes one every few
    minutes): the points of its burn-down chart."""

    budget = models.ForeignKey("budgets.Budget", on_delete=models.CASCADE, related_name="samples")
    window_start = models.DateTimeField()
    at = models.DateTimeField()
    used = models.PositiveBigIntegerField()
    limit = models.PositiveBigIntegerField()

    class Meta:
        app_label = "budgets"
        ordering = ["budget_id", "at"]
        indexes = [
            models.Index(fields=["budget", "window_start", "at"], name="budgetsample_window")
        ]

    def __str__(self) -> str:
        return f"{self.budget_id}@{self.at.isoformat()}: {self.used}/{self.limit}"
