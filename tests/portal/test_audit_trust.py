"""The audit chain holds against someone who can write the database but has neither the chain key
nor the object store: a re-hashed rewrite and a cut-off tail are both named by the chain check
(the API a platform admin calls); edits in the Django admin are audited like any other change."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from adapters.access import AccessContext
from adapters.storage.factory import get_storage
from core.audit import GENESIS_HASH
from core.audit import event_content as _content
from core.audit_models import AuditEvent
from portal.audit_checkpoint import CHECKPOINT_KEY, read_checkpoint
from portal.audit_verify import verify_chain
from portal.tasks import checkpoint_audit_chain
from tenants.services.tokens import token_issue

pytestmark = pytest.mark.django_db
VERIFY = "/api/v1/audit/verify/"


def make_events(world, n: int) -> list[AuditEvent]:
    for _ in range(n):
        token_issue(access=AccessContext.for_user(world.users["alice"]), scopes=["read"])
    return list(AuditEvent.objects.order_by("id"))


def as_db_owner(*statements: tuple[str, list]) -> None:
    """Bypass the append-only triggers, as an attacker with database-owner rights would."""
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        for sql, params in statements:
            cursor.execute(sql, params)
        cursor.execute("SET session_replication_role = origin")


def verify(world):
    return world.client("adam").get(VERIFY)


def unkeyed_hash(prev_hash: str, event: AuditEvent) -> str:
    payload = json.dumps(_content(event), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{prev_hash}\n{payload}".encode()).hexdigest()


def test_a_rewrite_rehashed_without_the_key_is_detected(world):
    events = make_events(world, 4)
    victim = events[2]
    # The attacker changes a row, then recomputes every hash after it and the head: the chain
    # links up again, as it would if the hash were a plain digest anyone can compute.
    statements: list[tuple[str, list]] = [
        ("UPDATE portal_auditevent SET actor_label = 'mallory' WHERE id = %s", [victim.pk])
    ]
    prev = events[1].hash
    victim.actor_label = "mallory"
    for event in events[2:]:
        new_hash = unkeyed_hash(prev, event)
        statements.append(
            (
                "UPDATE portal_auditevent SET prev_hash = %s, hash = %s WHERE id = %s",
                [prev, new_hash, event.pk],
            )
        )
        prev = new_hash
    statements.append(("UPDATE portal_auditchainhead SET last_hash = %s WHERE id = 1", [prev]))
    as_db_owner(*statements)
    response = verify(world)
    assert response.status_code == 409
    assert response.json()["first_broken_id"] == victim.pk
    assert "changed" in response.json()["reason"]


def test_a_cut_off_tail_is_detected_by_the_checkpoint(world):
    events = make_events(world, 5)
    assert checkpoint_audit_chain() == events[-1].pk
    assert verify(world).json()["ok"] is True
    kept = events[2]
    as_db_owner(
        ("DELETE FROM portal_auditevent WHERE id > %s", [kept.pk]),
        (
            "UPDATE portal_auditchainhead SET last_hash = %s, last_event_id = %s WHERE id = 1",
            [kept.hash, kept.pk],
        ),
    )
    response = verify(world)
    assert response.status_code == 409
    assert response.json()["first_broken_id"] == events[-1].pk
    assert "events were removed" in response.json()["reason"]
    # New events appended after the cut do not carry the checkpoint past the gap.
    make_events(world, 4)
    assert checkpoint_audit_chain() is None
    checkpoint = read_checkpoint()
    assert checkpoint is not None and checkpoint.event_id == events[-1].pk
    assert verify(world).status_code == 409


def test_emptying_the_whole_table_is_detected(world):
    make_events(world, 2)
    checkpoint_audit_chain()
    as_db_owner(
        ("DELETE FROM portal_auditevent", []),
        ("UPDATE portal_auditchainhead SET last_hash = %s, last_event_id = 0", [GENESIS_HASH]),
    )
    assert verify(world).status_code == 409


def test_a_checkpoint_not_written_with_the_key_is_reported(world):
    events = make_events(world, 2)
    forged = {"event_id": 1, "hash": events[0].hash, "created_at": "x", "mac": "0" * 64}
    get_storage().save_stream(
        CHECKPOINT_KEY, io.BytesIO(json.dumps(forged).encode()), max_bytes=4096
    )
    response = verify(world)
    assert response.status_code == 409
    assert "not written with this chain key" in response.json()["reason"]


def test_the_chain_grows_past_a_checkpoint_and_stays_intact(world):
    make_events(world, 2)
    checkpoint_audit_chain()
    make_events(world, 2)
    checkpoint_audit_chain()
    body = verify(world).json()
    assert body["ok"] is True and body["checked"] == AuditEvent.objects.count()


@pytest.fixture
def admin_client(world, client):
    adam = world.users["adam"]
    adam.is_staff = adam.is_superuser = True
    adam.save()
    client.force_login(adam)
    return client


def admin_rows():
    return list(
        AuditEvent.objects.filter(action__startswith="admin.").values_list(
            "action", "object_type", "actor_label"
        )
    )


def test_admin_edits_to_groups_users_and_schedules_are_audited(world, admin_client):
    assert admin_client.post("/admin/auth/group/add/", {"name": "auditors"}).status_code == 302
    group = Group.objects.get(name="auditors")
    nora = world.users["nora"]
    response = admin_client.post(
        f"/admin/auth/user/{nora.pk}/password/",
        {
            "password1": "a-new-long-password-42",
            "password2": "a-new-long-password-42",
            "usable_password": "true",
        },
    )
    assert response.status_code == 302
    every = IntervalSchedule.objects.create(every=10, period="seconds")
    task = PeriodicTask.objects.create(name="warm", task="x.y", interval=every)
    response = admin_client.post(
        f"/admin/django_celery_beat/periodictask/{task.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 302
    assert admin_rows() == [
        ("admin.add", "auth.group", "adam"),
        ("admin.change", "auth.user", "adam"),
        ("admin.delete", "django_celery_beat.periodictask", "adam"),
    ]
    assert AuditEvent.objects.get(action="admin.add").object_id == str(group.pk)


def test_a_bulk_delete_in_the_admin_audits_each_object(world, admin_client):
    ids = [world.users["nora"].pk, world.users["vera"].pk]
    response = admin_client.post(
        "/admin/auth/user/",
        {"action": "delete_selected", "_selected_action": ids, "post": "yes"},
    )
    assert response.status_code == 302
    rows = AuditEvent.objects.filter(action="admin.delete", object_type="auth.user")
    assert sorted(int(r.object_id) for r in rows) == sorted(ids)


def test_the_migration_rekeys_an_intact_unkeyed_chain_and_refuses_a_broken_one(world):
    import importlib

    from django.apps import apps

    rekey = importlib.import_module("portal.migrations.0003_audit_chain_hmac").rekey
    events = make_events(world, 3)
    prev, statements = GENESIS_HASH, []
    for event in events:  # the chain as the previous release wrote it
        old = unkeyed_hash(prev, event)
        statements.append(
            (
                "UPDATE portal_auditevent SET prev_hash = %s, hash = %s WHERE id = %s",
                [prev, old, event.pk],
            )
        )
        prev = old
    statements.append(("UPDATE portal_auditchainhead SET last_hash = %s WHERE id = 1", [prev]))
    as_db_owner(*statements)
    assert not verify_chain().ok
    original = events[1].actor_label
    tamper = "UPDATE portal_auditevent SET actor_label = %s WHERE id = %s"
    as_db_owner((tamper, ["x", events[1].pk]))
    with (
        pytest.raises(RuntimeError, match=f"#{events[1].pk} "),
        connection.schema_editor() as editor,
    ):
        rekey(apps, editor)
    as_db_owner((tamper, [original, events[1].pk]))
    with connection.schema_editor() as editor:
        rekey(apps, editor)
    assert verify_chain().ok


def test_deploy_check_warns_while_the_chain_key_is_derived_from_the_secret_key(settings):
    from django.core.checks import run_checks

    settings.DEBUG = False
    settings.AUDIT_CHAIN_KEY_DERIVED = True
    ids = {m.id for m in run_checks(include_deployment_checks=True)}
    assert "portal.W001" in ids
    settings.AUDIT_CHAIN_KEY_DERIVED = False
    assert "portal.W001" not in {m.id for m in run_checks(include_deployment_checks=True)}
