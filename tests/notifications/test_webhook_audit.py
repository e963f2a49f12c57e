"""A webhook's URL reaches the immutable audit chain as its scheme and host only: the path and
query, which receivers use as a bearer secret, are kept by the endpoint and never by the chain,
on create, update and delete (read back from the chain's rows)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from core.audit_models import AuditEvent
from tenants.notifications.redaction import audit_url

HOOKS = "/api/v1/tenants/acme/webhooks/"
SECRET_PATH = "/services/T0SECRET/B0SECRET/XXXXsecretXXXX"
OTHER_PATH = "/services/T1SECRET/B1SECRET/YYYYsecretYYYY"


def test_the_chain_keeps_no_webhook_path_or_query(world, settings, receiver):
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(receiver.url))
    client = world.client("alice")
    first = f"{origin}{SECRET_PATH}?token=querysecret"
    second = f"{origin}{OTHER_PATH}"
    created = client.post(HOOKS, {"name": "ops", "url": first}, format="json")
    assert created.status_code == 201, created.json()
    moved = client.patch(HOOKS + "ops/", {"url": second}, format="json")
    assert moved.status_code == 200, moved.json()
    assert client.patch(HOOKS + "ops/", {"active": False}, format="json").status_code == 200
    assert client.delete(HOOKS + "ops/").status_code == 204

    rows = list(AuditEvent.objects.filter(action__startswith="webhook.").order_by("id"))
    assert [r.action for r in rows] == [
        "webhook.create",
        "webhook.update",
        "webhook.update",
        "webhook.delete",
    ]
    kept = f"{origin}/[redacted]"
    create, move, off, delete = ((r.before or {}, r.after or {}) for r in rows)
    assert create[1]["url"] == kept
    assert move[0]["url"] == kept and move[1]["url"] == kept
    assert move[1]["url_changed"] is True
    assert off[1]["url_changed"] is False and off[1]["active"] is False
    assert delete[0]["url"] == kept
    everything = json.dumps([[r.before, r.after, r.object_id] for r in AuditEvent.objects.all()])
    for secret in ("T0SECRET", "T1SECRET", "XXXXsecret", "YYYYsecret", "querysecret"):
        assert secret not in everything


@pytest.mark.parametrize(
    "url, kept",
    [
        ("https://hooks.example.com/services/T/B/X", "https://hooks.example.com/[redacted]"),
        ("https://hooks.example.com/?token=abc", "https://hooks.example.com/[redacted]"),
        ("https://hooks.example.com/#abc", "https://hooks.example.com/[redacted]"),
        ("https://hooks.example.com", "https://hooks.example.com/"),
        ("https://hooks.example.com:8443/", "https://hooks.example.com:8443/"),
        ("https://user:pw@hooks.example.com/", "https://hooks.example.com/"),
        ("http://[2001:db8::1]:8080/x", "http://[2001:db8::1]:8080/[redacted]"),
        ("not a url", "[redacted]"),
        ("https://hooks.example.com:99999/x", "[redacted]"),
    ],
)
def test_audit_url_keeps_the_origin_only(url, kept):
    assert audit_url(url) == kept
