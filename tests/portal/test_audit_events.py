"""Every kind of change writes an audit event; audit_verify names a tampered row."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from adapters.access import AccessContext
from core.audit_models import AuditEvent
from tenants.services.tenancy import membership_remove, membership_set
from tenants.services.tokens import token_issue, token_revoke

pytestmark = pytest.mark.django_db


def actions():
    return list(AuditEvent.objects.order_by("id").values_list("action", flat=True))


def test_token_creation_and_revocation_are_audited(world):
    issued = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["read"], tenant=world.acme
    )
    token_revoke(token=issued.token, access=AccessContext.for_user(world.users["alice"]))
    events = AuditEvent.objects.filter(object_type="tenants.apitoken")
    assert [e.action for e in events] == ["token.create", "token.revoke"]
    assert (events[0].after or {})["prefix"] == issued.token.prefix
    # The secret is never logged. (maxsplit: a url-safe secret may itself hold '_', and one that
    # starts with it made split("_")[2] the empty string, found in any text.)
    secret = issued.plaintext.split("_", 2)[2]
    assert secret and secret not in json.dumps(events[0].after)


def test_membership_changes_are_audited_with_before_and_after(world):
    membership = membership_set(
        access=AccessContext.for_user(world.users["alice"]),
        tenant=world.acme,
        username="nora",
        role="viewer",
    )
    membership_set(
        access=AccessContext.for_user(world.users["alice"]),
        tenant=world.acme,
        username="nora",
        role="maintainer",
    )
    membership_remove(access=AccessContext.for_user(world.users["alice"]), membership=membership)
    events = list(AuditEvent.objects.filter(action__startswith="membership."))
    assert [(e.action, e.before, e.after) for e in events] == [
        ("membership.set", None, {"role": "viewer"}),
        ("membership.set", {"role": "viewer"}, {"role": "maintainer"}),
        ("membership.remove", {"role": "maintainer"}, None),
    ]
    assert all(e.tenant_label == "acme" and e.actor_label == "alice" for e in events)


def test_the_last_owner_cannot_be_removed(world):
    from core.errors import Conflict
    from tenants.models import Membership

    with pytest.raises(Conflict) as refused:
        membership_remove(
            access=AccessContext.for_user(world.users["adam"]),
            membership=Membership.objects.get(user__username="alice"),
        )
    assert refused.value.code == "membership.last_owner"
    assert Membership.objects.filter(user__username="alice", role="owner").exists()


def test_logins_and_failed_logins_are_audited(world, client):
    assert client.post("/login/", {"username": "alice", "password": "wrong"}).status_code == 200
    client.post("/login/", {"username": "alice", "password": "correct-horse-battery-staple"})
    assert actions()[-2:] == ["auth.login_failed", "auth.login"]


def test_audit_verify_command_passes_then_names_the_tampered_row(world, capsys):
    token_issue(access=AccessContext.for_user(world.users["alice"]), scopes=["read"])
    victim = token_issue(access=AccessContext.for_user(world.users["bob"]), scopes=["read"])
    call_command("audit_verify")
    assert "audit chain intact" in capsys.readouterr().out
    row = AuditEvent.objects.get(object_type="tenants.apitoken", object_id=str(victim.token.pk))
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(
            "UPDATE portal_auditevent SET actor_label = 'mallory' WHERE id = %s", [row.pk]
        )
        cursor.execute("SET session_replication_role = origin")
    with pytest.raises(CommandError, match=f"broken at event #{row.pk}") as failed:
        call_command("audit_verify")
    assert failed.value.returncode == 1


def test_audit_verify_api_is_for_platform_admins(world):
    assert world.client("adam").get("/api/v1/audit/verify/").json()["ok"] is True
    assert world.client("alice").get("/api/v1/audit/verify/").status_code == 403
