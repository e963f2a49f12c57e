"""Dismissing a notice through the API: for the caller only, as the pages' Dismiss button,
audited once; the list says whether the caller dismissed each, and filters on it; another
tenant's notice is a 404; a token needs the write scope."""

from __future__ import annotations

from core.audit_models import AuditEvent
from tenants.notifications.services import notify

NOTICES = "/api/v1/tenants/acme/notifications/"


def _told(world, key: str = "budget:1:0:80"):
    told = notify(tenant=world.acme, key=key, subject="Budget at 80%", body="80 of 100")
    assert told is not None
    return told


def test_it_dismisses_a_notice_for_the_caller_only(world):
    told = _told(world)
    vera, bob = world.client("vera"), world.client("bob")
    answer = vera.post(f"{NOTICES}{told.pk}/dismiss/")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["id"] == told.pk and answer.json()["dismissed"] is True
    listed = vera.get(NOTICES).json()["results"]
    assert [(n["id"], n["dismissed"]) for n in listed] == [(told.pk, True)]  # still listed
    assert [n["dismissed"] for n in bob.get(NOTICES).json()["results"]] == [False]
    # What the API did is what the pages show: gone from vera's banner, still on bob's.
    assert 'data-testid="notices"' not in vera.get("/t/acme/").content.decode()
    assert 'data-testid="notices"' in bob.get("/t/acme/").content.decode()


def test_it_filters_on_what_the_caller_dismissed(world):
    first, second = _told(world, "k1"), _told(world, "k2")
    vera = world.client("vera")
    vera.post(f"/t/acme/notifications/{first.pk}/dismiss/")  # the page's button
    assert [n["id"] for n in vera.get(NOTICES + "?dismissed=false").json()["results"]] == [
        second.pk
    ]
    assert [n["id"] for n in vera.get(NOTICES + "?dismissed=true").json()["results"]] == [first.pk]
    bad = vera.get(NOTICES + "?dismissed=maybe")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "notification.invalid_filter"


def test_a_dismissal_is_audited_once(world):
    told = _told(world)
    alice = world.client("alice")
    assert alice.post(f"{NOTICES}{told.pk}/dismiss/").status_code == 200
    assert alice.post(f"{NOTICES}{told.pk}/dismiss/").status_code == 200  # again: a no-op
    events = AuditEvent.objects.filter(action="notice.dismiss")
    assert events.count() == 1
    event = events.get()
    assert event.actor_id == world.users["alice"].pk and event.tenant_id == world.acme.pk
    assert event.object_id == str(told.pk)


def test_another_tenants_notice_is_not_found(world):
    theirs = notify(tenant=world.globex, key="k", subject="globex's", body="b")
    assert theirs is not None
    alice = world.client("alice")
    answer = alice.post(f"{NOTICES}{theirs.pk}/dismiss/")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "notification.not_found"
    told = _told(world)
    outsider = world.client("charlie").post(f"{NOTICES}{told.pk}/dismiss/")
    assert outsider.status_code == 404
    assert not theirs.dismissals.exists() and not told.dismissals.exists()


def test_a_token_needs_the_write_scope(world):
    told = _told(world)
    reader = world.token_client("vera", ["read"], tenant=world.acme)
    refused = reader.post(f"{NOTICES}{told.pk}/dismiss/")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "token.missing_scope"
    assert reader.get(NOTICES).status_code == 200
    writer = world.token_client("vera", ["write"], tenant=world.acme)
    assert writer.post(f"{NOTICES}{told.pk}/dismiss/").json()["dismissed"] is True
    assert told.dismissals.get().user == world.users["vera"]
