"""Writes: notify (once per key), a tenant's e-mail recipients and webhooks. Changes a person
makes are audited and checked against the access rules inside (tenants/access_port.py)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import record_event
from core.errors import ApplicationError, Conflict, NotFound
from core.tasks import task_named
from tenants.access_port import Access
from tenants.models import SLUG_VALIDATOR, Tenant
from tenants.notifications import address_guard, signing
from tenants.notifications.models import (
    Delivery,
    DeliveryChannel,
    EmailRecipient,
    NoticeDismissal,
    Notification,
    WebhookEndpoint,
)
from tenants.notifications.redaction import audit_url
from tenants.notifications.selectors import email_recipients_effective
from tenants.sso.sealing import seal

MANAGE = "manage_notifications"
MAX_KEY = 200
MAX_RECIPIENTS = 50
MAX_WEBHOOKS = 20


def notify(
    *, tenant: Tenant, key: str, subject: str, body: str, data: dict[str, Any] | None = None
) -> Notification | None:
    """Tell the tenant once: the notice on its pages, an e-mail to its recipients, a post to each
    active webhook. None when `key` was used before (by this process or any other): the unique
    (tenant, key) row is the claim, so two workers racing on one occasion send it once."""
    if not key or len(key) > MAX_KEY:
        raise ValueError(f"a notification key is 1-{MAX_KEY} characters")
    with transaction.atomic():
        try:
            with transaction.atomic():
                notification = Notification.objects.create(
                    tenant=tenant,
                    key=key,
                    subject=subject[:200],
                    body=body,
                    data=data or {},
                )
        except IntegrityError:
            return None
        deliveries = []
        recipients = email_recipients_effective(tenant=tenant)
        if recipients:
            deliveries.append(
                Delivery(
                    tenant=tenant,
                    notification=notification,
                    channel=DeliveryChannel.EMAIL,
                    recipients=recipients,
                )
            )
        for hook in WebhookEndpoint.objects.filter(tenant=tenant, active=True):
            deliveries.append(
                Delivery(
                    tenant=tenant,
                    notification=notification,
                    channel=DeliveryChannel.WEBHOOK,
                    webhook=hook,
                )
            )
        created = Delivery.objects.bulk_create(deliveries)
        record_event(
            action="notification.send",
            tenant=tenant,
            obj=notification,
            object_id=key,
            after={
                "subject": notification.subject,
                "email": recipients,
                "webhooks": [d.webhook.name for d in created if d.webhook is not None],
            },
        )
        ids = [d.pk for d in created]
        transaction.on_commit(lambda: _enqueue(ids))
    return notification


def _enqueue(delivery_ids: list[int]) -> None:
    deliver = task_named("tenants.notifications.deliver")
    for delivery_id in delivery_ids:
        deliver.delay(delivery_id)


# --- e-mail recipients ---


def email_recipient_add(
    *, access: Access, tenant: Tenant, email: str, request_id: str = ""
) -> EmailRecipient:
    access.require_tenant(tenant, MANAGE)
    email = (email or "").strip().lower()
    try:
        validate_email(email)
    except ValidationError:
        raise ApplicationError(
            "email_recipient.invalid", f"'{email[:80]}' is not an e-mail address."
        ) from None
    with transaction.atomic():
        Tenant.objects.select_for_update().get(pk=tenant.pk)
        if EmailRecipient.objects.filter(tenant=tenant).count() >= MAX_RECIPIENTS:
            raise Conflict(
                "email_recipient.too_many",
                f"A tenant has at most {MAX_RECIPIENTS} e-mail recipients; remove one first.",
            )
        if EmailRecipient.objects.filter(tenant=tenant, email=email).exists():
            raise Conflict("email_recipient.exists", f"'{email}' is already a recipient.")
        recipient = EmailRecipient.objects.create(
            tenant=tenant, email=email, created_by=access.user
        )
        record_event(
            action="email_recipient.add",
            actor=access.user,
            tenant=tenant,
            obj=recipient,
            object_id=f"{tenant.slug}:{email}",
            after={"email": email},
            request_id=request_id,
        )
    return recipient


def email_recipient_get(*, tenant: Tenant, email: str) -> EmailRecipient:
    found = EmailRecipient.objects.filter(tenant=tenant, email=email.strip().lower()).first()
    if found is None:
        raise NotFound(
            "email_recipient.not_found", f"'{email[:80]}' is not a recipient of '{tenant.slug}'."
        )
    return found


def email_recipient_remove(
    *, access: Access, recipient: EmailRecipient, request_id: str = ""
) -> None:
    access.require_tenant(recipient.tenant, MANAGE)
    with transaction.atomic():
        record_event(
            action="email_recipient.remove",
            actor=access.user,
            tenant=recipient.tenant,
            obj=recipient,
            object_id=f"{recipient.tenant.slug}:{recipient.email}",
            before={"email": recipient.email},
            request_id=request_id,
        )
        recipient.delete()


# --- webhooks ---


def _checked_url(url: str) -> str:
    """A URL a webhook may keep: well formed, and resolving to allowed addresses now (checked
    again at every send)."""
    from django.conf import settings

    url = (url or "").strip()
    if len(url) > 2000:
        raise ApplicationError("webhook.bad_url", "url is longer than 2000 characters.")
    try:
        address_guard.resolve(url, allow_private=settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES)
    except address_guard.AddressRefused as exc:
        raise ApplicationError(exc.code, exc.message) from None
    return url


def webhook_create(
    *, access: Access, tenant: Tenant, name: str, url: str, request_id: str = ""
) -> tuple[WebhookEndpoint, str]:
    """The endpoint and its secret, which is shown this once."""
    access.require_tenant(tenant, MANAGE)
    try:
        SLUG_VALIDATOR(name)
    except ValidationError:
        raise ApplicationError(
            "webhook.bad_name", "name: use 1-40 lowercase letters, digits and single hyphens."
        ) from None
    url = _checked_url(url)
    secret = signing.new_secret()
    try:
        with transaction.atomic():
            Tenant.objects.select_for_update().get(pk=tenant.pk)
            if WebhookEndpoint.objects.filter(tenant=tenant).count() >= MAX_WEBHOOKS:
                raise Conflict(
                    "webhook.too_many",
                    f"A tenant has at most {MAX_WEBHOOKS} webhooks; delete one first.",
                )
            hook = WebhookEndpoint.objects.create(
                tenant=tenant,
                name=name,
                url=url,
                secret_sealed=seal(secret),
                created_by=access.user,
            )
            record_event(
                action="webhook.create",
                actor=access.user,
                tenant=tenant,
                obj=hook,
                object_id=f"{tenant.slug}:{name}",
                after={"name": name, "url": audit_url(url), "active": True},
                request_id=request_id,
            )
    except IntegrityError:
        raise Conflict(
            "webhook.exists", f"Tenant '{tenant.slug}' already has a webhook named '{name}'."
        ) from None
    return hook, secret


def webhook_get(*, tenant: Tenant, name: str) -> WebhookEndpoint:
    hook = WebhookEndpoint.objects.filter(tenant=tenant, name=name).first()
    if hook is None:
        raise NotFound("webhook.not_found", f"Tenant '{tenant.slug}' has no webhook '{name}'.")
    return hook


def webhook_update(
    *,
    access: Access,
    hook: WebhookEndpoint,
    url: str | None = None,
    active: bool | None = None,
    request_id: str = "",
) -> WebhookEndpoint:
    access.require_tenant(hook.tenant, MANAGE)
    new_url = _checked_url(url) if url is not None else None
    with transaction.atomic():
        locked = (
            WebhookEndpoint.objects.select_for_update().select_related("tenant").get(pk=hook.pk)
        )
        old_url, old_active = locked.url, locked.active
        if new_url is not None:
            locked.url = new_url
        if active is not None:
            locked.active = active
        if (locked.url, locked.active) != (old_url, old_active):
            locked.save(update_fields=["url", "active"])
            # The chain keeps the URLs' origins and whether the URL changed (a new path on the
            # same host would otherwise look like no change), never the paths themselves.
            record_event(
                action="webhook.update",
                actor=access.user,
                tenant=locked.tenant,
                obj=locked,
                object_id=f"{locked.tenant.slug}:{locked.name}",
                before={"url": audit_url(old_url), "active": old_active},
                after={
                    "url": audit_url(locked.url),
                    "url_changed": locked.url != old_url,
                    "active": locked.active,
                },
                request_id=request_id,
            )
    return locked


def webhook_delete(*, access: Access, hook: WebhookEndpoint, request_id: str = "") -> None:
    """Deletes the endpoint and the record of its deliveries (the audit keeps that it existed)."""
    access.require_tenant(hook.tenant, MANAGE)
    with transaction.atomic():
        record_event(
            action="webhook.delete",
            actor=access.user,
            tenant=hook.tenant,
            obj=hook,
            object_id=f"{hook.tenant.slug}:{hook.name}",
            before={"url": audit_url(hook.url), "active": hook.active, "at": timezone.now()},
            request_id=request_id,
        )
        hook.delete()


def notice_dismiss(*, access: Access, notification: Notification, request_id: str = "") -> bool:
    """The caller no longer sees `notification` at the top of the tenant's pages (their own
    view, nobody else's; it stays listed). Audited (`notice.dismiss`) when it changes something:
    dismissing it again is a no-op that answers False."""
    access.require_tenant(notification.tenant, "view")
    if not getattr(access.user, "is_authenticated", False):
        raise ApplicationError("notice.no_person", "Only a signed-in person dismisses a notice.")
    with transaction.atomic():
        dismissal, created = NoticeDismissal.objects.get_or_create(
            notification=notification, user=access.user
        )
        if created:
            record_event(
                action="notice.dismiss",
                actor=access.user,
                tenant=notification.tenant,
                obj=notification,
                after={"key": notification.key, "dismissed_at": dismissal.dismissed_at},
                request_id=request_id,
            )
    return created
