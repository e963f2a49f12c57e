"""notify(): one notification per key, e-mailed through a real SMTP server on loopback and
posted to webhooks, every attempt recorded."""

from __future__ import annotations

import email
import json
import time

import pytest

from tenants.notifications import signing
from tenants.notifications.delivery import delivery_attempt
from tenants.notifications.models import Delivery, DeliveryStatus, Notification
from tenants.notifications.services import email_recipient_add, notify, webhook_create
from tests.faults.record import wait_until


@pytest.fixture
def owners_with_mail(world):
    world.users["alice"].email = "alice@acme.test"
    world.users["alice"].save()
    world.users["bob"].email = "bob@acme.test"  # a maintainer: not a default recipient
    world.users["bob"].save()
    return world


def _access(world, who):
    from adapters.access import AccessContext

    return AccessContext.for_user(world.users[who])


def test_it_emails_the_owners_once_per_key(
    owners_with_mail, smtp_server, eager_tasks, django_capture_on_commit_callbacks
):
    world = owners_with_mail
    with django_capture_on_commit_callbacks(execute=True):
        first = notify(
            tenant=world.acme,
            key="budget:1:2026-12-01:80",
            subject="Budget at 80%",
            body="acme used 80 of 100 tokens.",
            data={"threshold": 80},
        )
    with django_capture_on_commit_callbacks(execute=True):
        again = notify(
            tenant=world.acme, key="budget:1:2026-12-01:80", subject="again", body="again"
        )
    assert first is not None and again is None
    assert Notification.objects.filter(tenant=world.acme).count() == 1
    assert len(smtp_server.mails) == 1
    mail = smtp_server.mails[0]
    assert mail.recipients == ["alice@acme.test"]
    parsed = email.message_from_bytes(mail.content)
    assert parsed["Subject"] == "[acme] Budget at 80%"
    assert parsed["X-LoRA-Portal-Key"] == "budget:1:2026-12-01:80"
    assert "acme used 80 of 100 tokens." in parsed.get_payload()
    delivery = Delivery.objects.get(notification=first)
    assert delivery.status == DeliveryStatus.DELIVERED
    assert [(a.number, a.ok) for a in delivery.attempt_log.all()] == [(1, True)]


def test_listed_recipients_replace_the_owners(
    owners_with_mail, smtp_server, eager_tasks, django_capture_on_commit_callbacks
):
    world = owners_with_mail
    email_recipient_add(access=_access(world, "alice"), tenant=world.acme, email="Ops@Acme.test")
    with django_capture_on_commit_callbacks(execute=True):
        notify(tenant=world.acme, key="k1", subject="s", body="b")
    assert [m.recipients for m in smtp_server.mails] == [["ops@acme.test"]]


def test_an_unreachable_smtp_server_is_recorded_and_retried_later(
    owners_with_mail, settings, django_capture_on_commit_callbacks
):
    from tests.notifications.receivers import free_port

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()  # nobody listens
    notification = notify(tenant=owners_with_mail.acme, key="k2", subject="s", body="b")
    delivery = Delivery.objects.get(notification=notification)
    outcome = delivery_attempt(delivery_id=delivery.pk)
    assert outcome.retry_in == settings.NOTIFY_RETRY_BASE_SECONDS and not outcome.delivered
    attempt = delivery.attempt_log.get()
    assert not attempt.ok and "Connection refused" in attempt.error


def test_other_tenants_are_not_told(
    owners_with_mail, smtp_server, eager_tasks, django_capture_on_commit_callbacks
):
    world = owners_with_mail
    world.users["charlie"].email = "charlie@globex.test"
    world.users["charlie"].save()
    with django_capture_on_commit_callbacks(execute=True):
        notify(tenant=world.globex, key="k", subject="globex only", body="b")
    assert [m.recipients for m in smtp_server.mails] == [["charlie@globex.test"]]
    assert not Notification.objects.filter(tenant=world.acme).exists()


def test_each_failed_post_waits_twice_as_long_and_every_answer_is_kept(world, settings, receiver):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    receiver.fail_first = 2
    hook, secret = webhook_create(
        access=_access(world, "alice"), tenant=world.acme, name="ops", url=receiver.url
    )
    notification = notify(tenant=world.acme, key="k3", subject="s", body="b", data={"n": 1})
    delivery = Delivery.objects.get(notification=notification, webhook=hook)

    first = delivery_attempt(delivery_id=delivery.pk)
    assert first.retry_in == settings.NOTIFY_RETRY_BASE_SECONDS
    # The retry's message is due later: a copy arriving now sends nothing.
    assert delivery_attempt(delivery_id=delivery.pk).retry_in is None
    assert len(receiver.posts) == 1
    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=None)
    second = delivery_attempt(delivery_id=delivery.pk)
    assert second.retry_in == 2 * settings.NOTIFY_RETRY_BASE_SECONDS
    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=None)
    assert delivery_attempt(delivery_id=delivery.pk).delivered

    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED and delivery.attempts == 3
    assert [(a.number, a.status_code, a.ok) for a in delivery.attempt_log.all()] == [
        (1, 500, False),
        (2, 500, False),
        (3, 200, True),
    ]
    assert [json.loads(p.body)["attempt"] for p in receiver.posts] == [1, 2, 3]
    for post in receiver.posts:
        assert signing.verify(
            secret,
            post.headers[signing.TIMESTAMP_HEADER],
            post.body,
            post.headers[signing.SIGNATURE_HEADER],
            now=time.time(),
        )


def test_a_delivery_gives_up_after_the_last_attempt(world, settings, receiver):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    settings.NOTIFY_MAX_ATTEMPTS = 2
    receiver.fail_first = 5
    hook, _ = webhook_create(
        access=_access(world, "alice"), tenant=world.acme, name="ops", url=receiver.url
    )
    notification = notify(tenant=world.acme, key="k4", subject="s", body="b")
    delivery = Delivery.objects.get(notification=notification, webhook=hook)
    assert delivery_attempt(delivery_id=delivery.pk).retry_in is not None
    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=None)
    assert delivery_attempt(delivery_id=delivery.pk).retry_in is None
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED and len(receiver.posts) == 2


@pytest.mark.django_db(transaction=True)
def test_the_worker_retries_a_failing_webhook_until_it_answers(
    settings, receiver, celery_worker_process
):
    """Through a real Celery worker: two 500s, then 200, with the backoff between them."""
    from tests.factories import build_world

    settings.ADAPTER_STORAGE_BACKEND = "local"
    world = build_world()
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    receiver.fail_first = 2
    hook, secret = webhook_create(
        access=_access(world, "alice"), tenant=world.acme, name="ops", url=receiver.url
    )
    notification = notify(tenant=world.acme, key="k5", subject="Budget at 100%", body="b")
    delivery = Delivery.objects.get(notification=notification, webhook=hook)
    wait_until(
        lambda: Delivery.objects.get(pk=delivery.pk).status != DeliveryStatus.PENDING,
        timeout=60,
        what="the webhook delivered",
    )
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED
    attempts = list(delivery.attempt_log.all())
    assert [(a.status_code, a.ok) for a in attempts] == [(500, False), (500, False), (200, True)]
    # Each wait is at least the backoff planned for it (1 s, then 2 s).
    gaps = [(b.started_at - a.started_at).total_seconds() for a, b in zip(attempts, attempts[1:])]
    assert gaps[0] >= 1 and gaps[1] >= 2, gaps
    last = receiver.posts[-1]
    assert json.loads(last.body)["subject"] == "Budget at 100%"
    assert signing.verify(
        secret,
        last.headers[signing.TIMESTAMP_HEADER],
        last.body,
        last.headers[signing.SIGNATURE_HEADER],
        now=time.time(),
    )
