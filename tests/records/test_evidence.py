"""A version's compliance record: what it holds, who may read it, and that it verifies offline
and against the live chain, and stops verifying when an audit row or a served total changes."""

from __future__ import annotations

import base64
import copy
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from lora_portal_client.evidence import verify_file, verify_record

from portal.audit_checkpoint import write_checkpoint
from portal.evidence_signing import public_key_b64

pytestmark = pytest.mark.django_db


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
    assert verify_record(record) == []
    published = history.world.client("nora").get("/api/v1/evidence/key/").json()
    assert published["public_key"] == public_key_b64() == record["signature"]["public_key"]
    assert verify_record(record, public_key=published["public_key"]) == []
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    assert verify_file(path) == []
    assert command(tmp_path, record) == (0, json.dumps({"ok": True, "problems": []}))


def test_one_changed_audit_row_fails_offline_and_in_the_command(history, tmp_path):
    record = fetch(history)
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
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    from lora_portal_client.evidence import (
        SECTIONS,
        canonical_bytes,
        key_fingerprint,
        section_digest,
        signed_part,
    )

    record = fetch(history)
    forged = copy.deepcopy(record)
    forged["served"].update(requests=0, prompt_tokens=0, completion_tokens=0, by_day=[])
    forged["digests"] = {name: section_digest(forged[name]) for name in SECTIONS}
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    forged["signature"] = {
        "algorithm": "ed25519",
        "public_key": base64.b64encode(raw).decode(),
        "key_fingerprint": key_fingerprint(raw),
        "value": base64.b64encode(key.sign(canonical_bytes(signed_part(forged)))).decode(),
    }
    assert verify_record(forged) == []  # whole, but by whom: only pinning the key says
    problems = verify_record(forged, public_key=public_key_b64())
    assert any("not the portal's" in p for p in problems)
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
    assert verify_record(record) == []  # the file itself is untouched
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


def test_deploy_check_warns_while_the_signing_key_is_derived(settings):
    from django.core.checks import run_checks

    settings.DEBUG = False
    settings.EVIDENCE_SIGNING_KEY_DERIVED = True
    assert "portal.W002" in {m.id for m in run_checks(include_deployment_checks=True)}
    settings.EVIDENCE_SIGNING_KEY_DERIVED = False
    assert "portal.W002" not in {m.id for m in run_checks(include_deployment_checks=True)}
