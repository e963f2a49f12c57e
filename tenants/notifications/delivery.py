"""Sending one delivery: one attempt per call, recorded with its answer, and whether to try again.

The task (tenants/notifications/tasks.py) calls `delivery_attempt` and schedules the retry it
asks for; a conditional update claims each attempt, so a message delivered twice sends once.
"""

from __future__ import annotations

import json
import logging
import smtplib
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from django.conf import settings
from django.core.mail import EmailMessage
from django.db.models import F
from django.utils import timezone

from tenants.notifications import address_guard, signing
from tenants.notifications.models import (
    Delivery,
    DeliveryAttempt,
    DeliveryChannel,
    DeliveryStatus,
    Notification,
)
from tenants.sso.sealing import unseal

log = logging.getLogger(__name__)
# A retry message may arrive a little before the time it was planned for.
EARLY_TOLERANCE = timedelta(seconds=1)


@dataclass(frozen=True)
class AttemptOutcome:
    delivered: bool
    retry_in: float | None  # seconds to the next attempt; None: no further attempt


@dataclass(frozen=True)
class Answer:
    ok: bool
    status_code: int | None = None
    error: str = ""
    permanent: bool = False  # trying again cannot help


def backoff_seconds(attempt: int) -> float:
    """The wait after failed attempt `attempt` (1, 2, ...): doubling from the base."""
    return float(settings.NOTIFY_RETRY_BASE_SECONDS * 2 ** (attempt - 1))


def payload(notification: Notification, delivery: Delivery, attempt: int) -> dict[str, Any]:
    return {
        "type": "notification",
        "id": notification.pk,
        "key": notification.key,
        "tenant": delivery.tenant.slug,
        "subject": notification.subject,
        "body": notification.body,
        "data": notification.data,
        "created_at": notification.created_at.isoformat(),
        "delivery": delivery.pk,
        "attempt": attempt,
    }


def _send_email(delivery: Delivery) -> Answer:
    notification = delivery.notification
    if not delivery.recipients:
        return Answer(ok=False, error="no recipients", permanent=True)
    message = EmailMessage(
        subject=f"[{delivery.tenant.slug}] {notification.subject}",
        body=notification.body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=list(delivery.recipients),
        headers={"X-LoRA-Portal-Key": notification.key},
    )
    try:
        message.send(fail_silently=False)
    except smtplib.SMTPRecipientsRefused as exc:
        return Answer(ok=False, error=f"recipients refused: {exc.recipients}"[:500], permanent=True)
    except smtplib.SMTPResponseException as exc:
        return Answer(ok=False, status_code=exc.smtp_code, error=str(exc.smtp_error)[:500])
    except (smtplib.SMTPException, OSError) as exc:
        return Answer(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
    return Answer(ok=True)


def _post_webhook(delivery: Delivery, attempt: int) -> Answer:
    hook = delivery.webhook
    assert hook is not None
    try:
        target = address_guard.resolve(
            hook.url, allow_private=settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES
        )
    except address_guard.AddressRefused as exc:
        return Answer(ok=False, error=f"{exc.code}: {exc.message}"[:500], permanent=True)
    secret = unseal(hook.secret_sealed)
    if not secret:
        return Answer(
            ok=False, error="the secret cannot be unsealed (SECRET_KEY changed?)", permanent=True
        )
    body = json.dumps(
        payload(delivery.notification, delivery, attempt), sort_keys=True, separators=(",", ":")
    ).encode()
    timestamp = int(time.time())
    # Connect to the address just checked, not to whatever the name resolves to a moment later.
    parts = httpx.URL(hook.url)
    host_literal = f"[{target.address}]" if ":" in target.address else target.address
    pinned = parts.copy_with(host=host_literal.strip("[]"), port=target.port)
    default_port = 443 if target.scheme == "https" else 80
    host_header = target.host if target.port == default_port else f"{target.host}:{target.port}"
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "lora-portal-webhooks",
        "Host": host_header,
        "X-LoRA-Portal-Event": "notification",
        "X-LoRA-Portal-Delivery": str(delivery.pk),
        signing.TIMESTAMP_HEADER: str(timestamp),
        signing.SIGNATURE_HEADER: signing.signature(secret, timestamp, body),
    }
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    try:
        with httpx.Client(
            timeout=settings.WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False, trust_env=False
        ) as client:
            response = client.post(pinned, content=body, headers=headers, extensions=extensions)
    except httpx.HTTPError as exc:
        return Answer(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
    if 200 <= response.status_code < 300:
        return Answer(ok=True, status_code=response.status_code)
    return Answer(
        ok=False,
        status_code=response.status_code,
        error=f"HTTP {response.status_code}: {response.text[:200]}"[:500],
    )


def delivery_attempt(*, delivery_id: int) -> AttemptOutcome:
    """Make the next attempt of a pending delivery, record it, and say when to try again."""
    now = timezone.now()
    delivery = (
        Delivery.objects.select_related("tenant", "notification", "webhook")
        .filter(pk=delivery_id)
        .first()
    )
    if delivery is None or delivery.status != DeliveryStatus.PENDING:
        return AttemptOutcome(delivered=False, retry_in=None)
    if delivery.next_attempt_at is not None and delivery.next_attempt_at > now + EARLY_TOLERANCE:
        return AttemptOutcome(delivered=False, retry_in=None)  # a stale duplicate message
    number = delivery.attempts + 1
    claimed = Delivery.objects.filter(
        pk=delivery.pk, status=DeliveryStatus.PENDING, attempts=delivery.attempts
    ).update(attempts=F("attempts") + 1, next_attempt_at=None)
    if claimed != 1:
        return AttemptOutcome(delivered=False, retry_in=None)  # another worker took it
    started = time.monotonic()
    email = delivery.channel == DeliveryChannel.EMAIL
    answer = _send_email(delivery) if email else _post_webhook(delivery, number)
    finished = timezone.now()
    DeliveryAttempt.objects.create(
        delivery=delivery,
        number=number,
        started_at=now,
        duration_ms=int((time.monotonic() - started) * 1000),
        status_code=answer.status_code,
        ok=answer.ok,
        error=answer.error,
    )
    if answer.ok:
        Delivery.objects.filter(pk=delivery.pk).update(
            status=DeliveryStatus.DELIVERED, delivered_at=finished
        )
        return AttemptOutcome(delivered=True, retry_in=None)
    if answer.permanent or number >= settings.NOTIFY_MAX_ATTEMPTS:
        Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED)
        log.warning(
            "delivery %s failed for good after %s attempt(s): %s", delivery.pk, number, answer.error
        )
        return AttemptOutcome(delivered=False, retry_in=None)
    wait = backoff_seconds(number)
    Delivery.objects.filter(pk=delivery.pk).update(
        next_attempt_at=finished + timedelta(seconds=wait)
    )
    return AttemptOutcome(delivered=False, retry_in=wait)


def stalled_deliveries(*, grace: timedelta) -> list[int]:
    """Pending deliveries whose next attempt is overdue by more than `grace` (its message was
    lost, e.g. with a broker restart): the sweep enqueues them again."""
    cutoff = timezone.now() - grace
    return list(
        Delivery.objects.filter(status=DeliveryStatus.PENDING)
        .filter(next_attempt_at__lt=cutoff)
        .values_list("pk", flat=True)[:500]
    ) + list(
        Delivery.objects.filter(
            status=DeliveryStatus.PENDING, attempts=0, created_at__lt=cutoff
        ).values_list("pk", flat=True)[:500]
    )
