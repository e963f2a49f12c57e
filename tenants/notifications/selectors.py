"""Reads: a tenant's notifications, recipients, webhooks and their deliveries."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from core.errors import NotFound
from tenants.models import Membership, Tenant, TenantRole
from tenants.notifications.models import (
    Delivery,
    EmailRecipient,
    NoticeDismissal,
    Notification,
    WebhookEndpoint,
)

# How long a notification stays a notice at the top of the tenant's pages.
NOTICE_DAYS = 7


def email_recipients_effective(*, tenant: Tenant) -> list[str]:
    """Who an e-mail goes to now: the tenant's list, or with none listed its owners (those
    with an address)."""
    listed = list(EmailRecipient.objects.filter(tenant=tenant).values_list("email", flat=True))
    if listed:
        return listed
    owners = (
        Membership.objects.filter(tenant=tenant, role=TenantRole.OWNER, user__is_active=True)
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )
    return sorted({email.lower() for email in owners})


def email_recipients_of(*, tenant: Tenant) -> QuerySet[EmailRecipient]:
    return EmailRecipient.objects.filter(tenant=tenant).order_by("email")


def notifications_of(*, tenant: Tenant) -> QuerySet[Notification]:
    return Notification.objects.filter(tenant=tenant).order_by("-created_at", "-id")


def notifications_seen_by(
    *, tenant: Tenant, user: Any, dismissed: bool | None = None
) -> QuerySet[Notification]:
    """The tenant's notifications, each with `dismissed`: whether `user` dismissed it (the
    notice banner's rule, recent_notices); `dismissed` given keeps only those (True) or the
    others (False)."""
    mine = NoticeDismissal.objects.filter(notification=OuterRef("pk"), user_id=user.pk)
    found = notifications_of(tenant=tenant).annotate(dismissed=Exists(mine))
    if dismissed is not None:
        found = found.filter(dismissed=dismissed)
    return found


def recent_notices(*, tenant: Tenant, user: Any = None, limit: int = 3) -> list[Notification]:
    """The tenant's notices of the last NOTICE_DAYS, but those `user` dismissed."""
    since = timezone.now() - timedelta(days=NOTICE_DAYS)
    found = notifications_of(tenant=tenant).filter(created_at__gte=since)
    if user is not None and user.is_authenticated:
        found = found.exclude(dismissals__user=user)
    return list(found[:limit])


def notification_get(*, tenant: Tenant, notification_id: str | int) -> Notification:
    """The tenant's notification; 404 for another tenant's or none."""
    try:
        number = int(notification_id)
    except (TypeError, ValueError):
        number = -1
    found = Notification.objects.filter(tenant=tenant, pk=number).first()
    if found is None:
        raise NotFound(
            "notification.not_found",
            f"Tenant '{tenant.slug}' has no notification {notification_id}.",
        )
    return found


def webhooks_of(*, tenant: Tenant) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(tenant=tenant).order_by("name")


def deliveries_of(*, tenant: Tenant) -> QuerySet[Delivery]:
    return (
        Delivery.objects.filter(tenant=tenant)
        .select_related("notification", "webhook")
        .prefetch_related("attempt_log")
        .order_by("-created_at", "-id")
    )


def webhook_deliveries(*, hook: WebhookEndpoint) -> QuerySet[Delivery]:
    return deliveries_of(tenant=hook.tenant).filter(webhook=hook)
