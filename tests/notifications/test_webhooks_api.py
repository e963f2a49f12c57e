"""The webhooks, e-mail recipients and notifications API: owners manage, members read the
notifications, another tenant is a 404; where a webhook may post (SSRF guard)."""

from __future__ import annotations

import pytest

from core.audit_models import AuditEvent
from tenants.notifications.delivery import delivery_attempt
from tenants.notifications.models import Delivery, DeliveryStatus, WebhookEndpoint
from tenants.notifications.services import notify

HOOKS = "/api/v1/tenants/acme/webhooks/"


def test_it_shows_the_secret_once(world, settings, receiver):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    client = world.client("alice")
    created = client.post(HOOKS, {"name": "ops", "url": receiver.url}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["secret"].startswith("whsec_")
    shown = client.get(HOOKS + "ops/").json()
    assert "secret" not in shown and shown["url"] == receiver.url
    assert created.json()["secret"] not in WebhookEndpoint.objects.get().secret_sealed
    assert AuditEvent.objects.filter(action="webhook.create", object_id="acme:ops").exists()


def test_viewers_and_maintainers_may_not_manage_webhooks(world):
    for who in ("vera", "bob"):
        answer = world.client(who).post(
            HOOKS, {"name": "x", "url": "https://hooks.example.com/"}, format="json"
        )
        assert answer.status_code == 403, (who, answer.json())
        assert world.client(who).get(HOOKS).status_code == 403


def test_it_answers_404_for_another_tenant(world):
    charlie = world.client("charlie")
    assert charlie.get(HOOKS).status_code == 404
    assert charlie.get("/api/v1/tenants/acme/notifications/").status_code == 404
    assert charlie.get("/api/v1/tenants/acme/email-recipients/").status_code == 404
    assert charlie.get(HOOKS + "ops/deliveries/").status_code == 404


@pytest.mark.parametrize(
    "url, code",
    [
        ("http://127.0.0.1:8080/hook", "webhook.private_address"),
        ("http://localhost/hook", "webhook.private_address"),
        ("http://[::1]/hook", "webhook.private_address"),
        ("http://169.254.169.254/latest/meta-data/", "webhook.private_address"),
        ("http://10.1.2.3/hook", "webhook.private_address"),
        ("http://192.168.0.7/hook", "webhook.private_address"),
        ("http://[::ffff:127.0.0.1]/hook", "webhook.private_address"),
        ("http://0.0.0.0/hook", "webhook.private_address"),
        ("ftp://hooks.example.com/", "webhook.bad_scheme"),
        ("file:///etc/passwd", "webhook.bad_scheme"),
        ("https://user:pw@hooks.example.com/", "webhook.bad_url"),
        ("https://no-such-host.invalid/", "webhook.unresolvable"),
    ],
)
def test_it_refuses_urls_that_are_not_public_http(world, url, code):
    answer = world.client("alice").post(HOOKS, {"name": "x", "url": url}, format="json")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == code, answer.json()
    assert not WebhookEndpoint.objects.exists()


def test_it_checks_the_address_again_at_send_time(world, settings, receiver):
    """Saved while private addresses were allowed (or while the name resolved elsewhere): the
    post is refused for good when the address is not allowed at send time, and nothing is sent."""
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    world.client("alice").post(HOOKS, {"name": "ops", "url": receiver.url}, format="json")
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    notification = notify(tenant=world.acme, key="k", subject="s", body="b")
    delivery = Delivery.objects.get(notification=notification, channel="webhook")
    assert delivery_attempt(delivery_id=delivery.pk).retry_in is None
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED and receiver.posts == []
    assert delivery.attempt_log.get().error.startswith("webhook.private_address")


def test_deliveries_list_every_attempt(world, settings, receiver):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    receiver.fail_first = 1
    client = world.client("alice")
    client.post(HOOKS, {"name": "ops", "url": receiver.url}, format="json")
    notification = notify(tenant=world.acme, key="budget:7:x:50", subject="s", body="b")
    delivery = Delivery.objects.get(notification=notification, channel="webhook")
    delivery_attempt(delivery_id=delivery.pk)
    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=None)
    delivery_attempt(delivery_id=delivery.pk)
    listed = client.get(HOOKS + "ops/deliveries/").json()["results"]
    assert [d["notification"] for d in listed] == ["budget:7:x:50"]
    assert listed[0]["status"] == "delivered"
    assert [(a["number"], a["status_code"], a["ok"]) for a in listed[0]["attempt_log"]] == [
        (1, 500, False),
        (2, 200, True),
    ]


def test_members_read_notifications(world):
    notify(tenant=world.acme, key="k1", subject="Budget at 50%", body="b")
    notify(tenant=world.globex, key="k1", subject="not acme's", body="b")
    answer = world.client("vera").get("/api/v1/tenants/acme/notifications/")
    assert [n["subject"] for n in answer.json()["results"]] == ["Budget at 50%"]


def test_owners_manage_email_recipients(world):
    client = world.client("alice")
    url = "/api/v1/tenants/acme/email-recipients/"
    assert client.post(url, {"email": "ops@acme.test"}, format="json").status_code == 201
    assert client.post(url, {"email": "ops@acme.test"}, format="json").json()["error"]["code"] == (
        "email_recipient.exists"
    )
    assert client.post(url, {"email": "not-an-address"}, format="json").json()["error"]["code"] == (
        "email_recipient.invalid"
    )
    assert [r["email"] for r in client.get(url).json()["results"]] == ["ops@acme.test"]
    assert client.delete(url + "ops@acme.test/").status_code == 204
    assert client.get(url).json()["results"] == []
    assert AuditEvent.objects.filter(action="email_recipient.remove").exists()


def test_a_webhook_is_turned_off_and_deleted(world, settings, receiver):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    client = world.client("alice")
    client.post(HOOKS, {"name": "ops", "url": receiver.url}, format="json")
    assert client.patch(HOOKS + "ops/", {"active": False}, format="json").json()["active"] is False
    notify(tenant=world.acme, key="k", subject="s", body="b")
    assert not Delivery.objects.filter(channel="webhook").exists()
    assert client.delete(HOOKS + "ops/").status_code == 204
    assert not WebhookEndpoint.objects.exists()
