"""The notification tables (app label `tenants`): what was said, to whom, and every attempt."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Notification(models.Model):
    """One thing a tenant was told. `key` names the occasion (e.g. a budget threshold in one
    window): a second notify() with the same key tells nobody anything."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="notifications"
    )
    key = models.CharField(max_length=200)
    subject = models.CharField(max_length=200)
    body = models.TextField()
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "tenants"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="notification_unique_key")
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.key}"


class NoticeDismissal(models.Model):
    """One person no longer wants a notification at the top of the tenant's pages (it stays on
    the notifications page, and for everyone else)."""

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="dismissals"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notice_dismissals"
    )
    dismissed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "tenants"
        constraints = [
            models.UniqueConstraint(fields=["notification", "user"], name="notice_dismissed_once")
        ]

    def __str__(self) -> str:
        return f"{self.notification_id} by {self.user_id}"


class EmailRecipient(models.Model):
    """Who gets a tenant's notifications by e-mail; with none listed, its owners do."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="email_recipients"
    )
    email = models.EmailField(max_length=254)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "tenants"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "email"], name="emailrecipient_unique")
        ]
        ordering = ["email"]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.email}"


class WebhookEndpoint(models.Model):
    """A URL the tenant's notifications are posted to, signed with its secret (sealed at rest:
    it is needed in clear to sign, and shown only once, when the endpoint is made)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=40)
    url = models.CharField(max_length=2000)
    secret_sealed = models.TextField()
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "tenants"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="webhook_unique_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.name}"


class DeliveryChannel(models.TextChoices):
    EMAIL = "email"
    WEBHOOK = "webhook"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its next attempt
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up: refused for good, or out of attempts


class Delivery(models.Model):
    """One notification on one channel: the e-mail to the recipients of the moment, or the post
    to one webhook."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    channel = models.CharField(max_length=8, choices=DeliveryChannel.choices)
    webhook = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, null=True, blank=True, related_name="deliveries"
    )
    recipients = models.JSONField(default=list, blank=True)
    status = models.CharField(
        max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "tenants"
        constraints = [
            models.UniqueConstraint(
                fields=["notification", "webhook"],
                condition=Q(webhook__isnull=False),
                name="delivery_unique_webhook",
            ),
            models.UniqueConstraint(
                fields=["notification"],
                condition=Q(channel="email"),
                name="delivery_unique_email",
            ),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.notification_id}:{self.channel}:{self.status}"


class DeliveryAttempt(models.Model):
    """One try of a delivery and what came back: the HTTP status, or the error."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    ok = models.BooleanField(default=False)
    error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        app_label = "tenants"
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="deliveryattempt_unique")
        ]
        ordering = ["number"]

    def __str__(self) -> str:
        return f"{self.delivery_id}#{self.number}: {'ok' if self.ok else self.error[:40]}"
