"""A version's compliance record: what it holds, who may read it, and that it verifies offline
and against the live chain, and stops verifying when an audit row or a served total changes."""

from __future__ import annotations

import copy
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from lora_portal_client.evidence import NOT_PINNED, PinnedKeys, verify_file, verify_record

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from adapters.services.lifecycle import version_disable
from core.audit_models import AuditEvent
from portal.audit_checkpoint import write_checkpoint
from portal.evidence_signing import portal_keys, public_key_b64
from tests.records.forgery import forged_copy

pytestmark = pytest.mark.django_db


def pinned() -> PinnedKeys:
    return PinnedKeys.parse(portal_keys())


def fetch(history, who="alice"):
    response = history.world.client(who).get(history.url)
    assert response.status_code == 200, response.content
    return response.json()


def command(tmp_path, record) -> tuple[int, str]:
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(record))
    out = io.StringIO()
    try:
        call_command("audit_verify", "--evidence", str(path), "--json", stdout=out)
    except CommandError as exc:
        return exc.returncode, str(exc)
    return 0, out.getvalue().strip()


def test_it_holds_the_versions_files_checks_decisions_releases_serving_and_audit(history):
    write_checkpoint()
    record = fetch(history)
    assert record["version"]["name"] == "support@3"
    assert record["version"]["manifest"][0]["sha256"] == "ab" * 32
    assert record["validation"]["checks"] == [
        {"name": "files.set", "outcome": "passed", "codes": []}
    ]
    assert [(d["kind"], d["actor"], d["comment"]) for d in record["decisions"]] == [
        ("approve", "rita", "looks fine"),
        ("release", "alice", ""),
    ]
    assert [(r["alias"], r["weight"]) for r in record["releases"]] == [("support-bot", 100)]
    served = record["served"]
    assert [(e["engine"], e["pool"], e["resident_now"]) for e in served["engines"]] == [
        ("gpu-1", "shared", "resident_gpu")
    ]
    assert served["engines"][0]["first_loaded"] is not None
    assert (served["requests"], served["prompt_tokens"], served["completion_tokens"]) == (
        42,
        420,
        210,
    )
    actions = [e["action"] for e in record["audit_events"]]
    assert actions == [
        "version.upload",
        "version.validate",
        "version.approve",
        "version.release",
        "alias.set",
        "version.evidence_export",
    ]
    assert all(e["tenant"] == "acme" for e in record["audit_events"])
    anchor = record["anchor"]
    assert anchor["chain_head"]["event_id"] == record["audit_events"][-1]["id"]
    assert anchor["checkpoint"]["event_id"] < anchor["chain_head"]["event_id"]


def test_it_verifies_offline_pinned_to_the_published_key_and_against_the_chain(history, tmp_path):
    record = fetch(history)
    assert verify_record(record) == [NOT_PINNED]  # whole, but checked against no one's key
    published = history.world.client("nora").get("/api/v1/evidence/key/").json()
    assert published["public_key"] == public_key_b64() == record["signature"]["public_key"]
    assert published["keys"] == [
        {
            "algorithm": "ed25519",
            "public_key": public_key_b64(),
            "key_fingerprint": record["signature"]["key_fingerprint"],
            "current": True,
        }
    ]
    assert verify_record(record, public_key=published["public_key"]) == []
    assert verify_record(record, pinned=PinnedKeys.from_published(published)) == []
    fingerprint = PinnedKeys.parse([record["signature"]["key_fingerprint"]])
    assert verify_record(record, pinned=fingerprint) == []
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    assert verify_file(path, pinned=pinned()) == []
    assert verify_file(path) == [NOT_PINNED]
    assert command(tmp_path, record) == (0, json.dumps({"ok": True, "problems": []}))


def test_one_changed_audit_row_fails_offline_and_in_the_command(history, tmp_path):
    record = fetch(history)
    assert verify_record(record, pinned=pinned()) == []
    tampered = copy.deepcopy(record)
    approve = next(e for e in tampered["audit_events"] if e["action"] == "version.approve")
    approve["actor"] = "alice"  # the uploader's tenant owner "approved" it
    problems = verify_record(tampered)
    assert any(p.startswith("signature:") for p in problems)
    assert "audit_events: content differs from its digest (changed after export)" in problems
    code, message = command(tmp_path, tampered)
    assert code == 1
    assert f"audit event {approve['id']}: its fields do not give its hash" in message


def test_one_changed_served_total_fails_offline_and_in_the_command(history, tmp_path):
    record = fetch(history)
    tampered = copy.deepcopy(record)
    tampered["served"]["requests"] -= 40
    tampered["served"]["by_day"][0]["requests"] -= 40  # kept consistent: only the signature sees it
    problems = verify_record(tampered)
    assert "served: content differs from its digest (changed after export)" in problems
    code, message = command(tmp_path, tampered)
    assert code == 1 and "served: " in message


def test_a_record_re_signed_by_someone_else_fails_when_the_key_is_pinned(history, tmp_path):
    forged, _ = forged_copy(fetch(history))
    # Whole and correctly signed, by someone: without a pinned key it does not verify.
    assert verify_record(forged) == [NOT_PINNED]
    problems = verify_record(forged, public_key=public_key_b64())
    assert any("not the portal's" in p for p in problems)
    assert problems == verify_record(forged, pinned=pinned())
    assert command(tmp_path, forged)[0] == 1


def test_the_command_fails_when_the_chain_changed_after_export(history, tmp_path):
    record = fetch(history)
    event_id = record["audit_events"][1]["id"]
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(
            "UPDATE portal_auditevent SET actor_label = 'nobody' WHERE id = %s", [event_id]
        )
        cursor.execute("SET session_replication_role = origin")
    assert verify_record(record, pinned=pinned()) == []  # the file itself is untouched
    code, message = command(tmp_path, record)
    assert code == 1 and f"the audit chain is broken at #{event_id}" in message


def test_the_command_fails_when_a_past_days_usage_changed_after_export(history, tmp_path):
    from gateway.models import DailyUsage

    record = fetch(history)
    past = record["served"]["by_day"][0]["day"]
    DailyUsage.objects.filter(version=history.version, day=past).update(requests=39)
    code, message = command(tmp_path, record)
    assert code == 1 and f"served: {past} requests is 40 in the record, 39 in the portal" in message
    # Today's row may still grow after the export: that is not a mismatch.
    DailyUsage.objects.filter(version=history.version, day=past).update(requests=40)
    today = record["served"]["by_day"][-1]["day"]
    DailyUsage.objects.filter(version=history.version, day=today).update(requests=5)
    assert command(tmp_path, record)[0] == 0


@pytest.mark.parametrize("who", ["alice", "adam", "aude"])
def test_owners_platform_admins_and_auditors_read_it(history, who):
    assert fetch(history, who)["version"]["tenant"] == "acme"


@pytest.mark.parametrize("who", ["bob", "vera"])
def test_maintainers_and_viewers_are_refused(history, who):
    response = history.world.client(who).get(history.url)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "evidence.not_allowed"


@pytest.mark.parametrize("who", ["charlie", "nora"])
def test_another_tenants_version_is_not_found(history, who):
    assert history.world.client(who).get(history.url).status_code == 404


def test_anonymous_callers_are_refused(history):
    assert history.world.client(None).get(history.url).status_code in (401, 403)


def test_a_missing_version_is_not_found(history):
    url = history.url.replace("/versions/3/", "/versions/9/")
    assert history.world.client("alice").get(url).json()["error"]["code"] == "version.not_found"


def test_without_a_signing_key_the_deploy_check_fails_and_no_record_is_signed(history, settings):
    from django.core.checks import run_checks

    settings.DEBUG = False
    settings.EVIDENCE_SIGNING_KEY = ""
    assert "portal.E002" in {m.id for m in run_checks(include_deployment_checks=True)}
    response = history.world.client("alice").get(history.url)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "evidence.signing_key_missing"
    assert not AuditEvent.objects.filter(action="version.evidence_export").exists()
    settings.EVIDENCE_SIGNING_KEY = "7e57" * 16
    assert "portal.E002" not in {m.id for m in run_checks(include_deployment_checks=True)}


def test_records_signed_before_a_key_rotation_still_verify(history, settings, tmp_path):
    old_record = fetch(history)
    old_key = public_key_b64()
    settings.EVIDENCE_SIGNING_KEY = "0123" * 16  # the new seed
    settings.EVIDENCE_VERIFY_KEYS = [old_key]  # the old public key, still published
    published = history.world.client("alice").get("/api/v1/evidence/key/").json()
    assert published["public_key"] == public_key_b64() != old_key
    assert [(k["public_key"], k["current"]) for k in published["keys"]] == [
        (public_key_b64(), True),
        (old_key, False),
    ]
    new_record = fetch(history)
    assert new_record["signature"]["public_key"] == public_key_b64()
    keys = PinnedKeys.from_published(published)
    assert verify_record(old_record, pinned=keys) == []
    assert verify_record(new_record, pinned=keys) == []
    assert command(tmp_path, old_record)[0] == 0
    assert command(tmp_path, new_record)[0] == 0
    # Pinned to the new key only, the old record names its key as not the portal's.
    problems = verify_record(old_record, public_key=public_key_b64())
    assert any("not the portal's" in p for p in problems)


def test_it_holds_the_events_the_registrys_own_services_write(history):
    """The lifecycle and alias services name a version `tenant/adapter@N` and an alias
    `tenant/alias` in the audit log, not by id: the record must find those too."""
    alice = history.world.users["alice"]
    access = AccessContext.for_user(alice)
    alias_set(
        access=access,
        tenant=history.world.acme,
        name="support-next",
        targets=[{"version": "support@3", "weight": 100}],
        reason="a second alias",
    )
    version_disable(access=access, version=history.version, reason="retired")
    actions = [e["action"] for e in fetch(history)["audit_events"]]
    assert "version.disable" in actions
    assert actions.count("alias.set") == 2  # the fixture's alias and the new one
