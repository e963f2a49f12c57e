"""The CLI's records commands against the portal's compliance records, evidence keys, audit
export and cost view.

- `evidence T/A@N [-o FILE]`   GET .../versions/{n}/evidence/, saved byte for byte
- `evidence verify FILE`       lora_portal_client.evidence.verify_file, pinned to the portal's keys
                               (--key, or those `login` saved): exit 0 verified, 1 not or unpinned
- `audit export ...`           GET /api/v1/audit/export/?format=csv|jsonl&tenant=&from=&to=&action=
- `cost ...`                   GET /api/v1/cost/?from=&to=&tenant=
"""

from __future__ import annotations

import csv
import json

import pytest
from lora_portal_client import paths
from lora_portal_client.evidence import NOT_PINNED

from adapters.models import AdapterVersion
from tests.client.steps import released
from tests.client.test_client_contract import missing_from_schema
from tests.records.forgery import forged_copy

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_records_paths_are_in_the_openapi_schema():
    assert missing_from_schema(paths.RECORDS) == []


def test_evidence_is_saved_and_verifies_offline_and_fails_when_tampered(cli, tmp_path):
    ref = released(cli, tmp_path)
    record = tmp_path / "record.json"
    done = cli("evidence", ref, "-o", str(record))
    assert done.returncode == 0, done.stderr
    assert isinstance(json.loads(record.read_bytes()), dict)
    key_url = cli.url + paths.EVIDENCE_KEY
    done = cli("evidence", "verify", str(record), "--key", key_url)  # fetched with the token
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "verified" in done.stdout
    fingerprint = json.loads(record.read_text())["signature"]["key_fingerprint"]
    # Offline, no token: pinned by a fingerprint.
    assert cli.json("evidence", "verify", str(record), "--key", fingerprint, who=None) == {
        "file": str(record),
        "ok": True,
        "problems": [],
        "pinned": [fingerprint],
    }

    # The manifest digest is in the record and in the chain it anchors: changing it breaks it.
    digest = AdapterVersion.objects.get(number=1).manifest_sha256
    text = record.read_text()
    assert digest in text
    tampered = tmp_path / "tampered.json"
    tampered.write_text(text.replace(digest, "0" * len(digest)))
    done = cli("evidence", "verify", str(tampered), "--key", fingerprint, who=None)
    assert done.returncode == 1 and done.stdout.strip()
    result = cli.json("evidence", "verify", str(tampered), "--key", fingerprint, who=None, code=1)
    assert result["ok"] is False and result["problems"]


def test_a_forged_record_does_not_verify_and_no_pinned_key_is_not_verified(cli, tmp_path):
    """Re-signed by someone else with their own key: whole and correctly signed, but not by the
    portal. Without a pinned key nothing says so, so that is a failure too."""
    ref = released(cli, tmp_path)
    genuine = tmp_path / "genuine.json"
    assert cli("evidence", ref, "-o", str(genuine)).returncode == 0
    forged, forger = forged_copy(json.loads(genuine.read_text()))
    forged_file = tmp_path / "forged.json"
    forged_file.write_text(json.dumps(forged))

    # Nothing pinned: neither record verifies, and the message says why.
    for path in (genuine, forged_file):
        done = cli("evidence", "verify", str(path), who=None)
        assert done.returncode == 1
        assert "signature not checked against the portal's key" in done.stdout
        body = cli.json("evidence", "verify", str(path), who=None, code=1)
        assert body["problems"] == [NOT_PINNED] and body["pinned"] == []

    # `login` fetches the portal's keys once and saves them; then the genuine record verifies
    # and the forged one names the key it was signed with.
    login = cli("login", "--token-stdin", stdin=cli.tokens["alice"] + "\n", who=None)
    assert login.returncode == 0, login.stderr
    saved = json.loads((cli.home / "lora-portal" / "config.json").read_text())
    published = json.loads(genuine.read_text())["signature"]
    assert saved["evidence_keys"] == [published["public_key"]]
    assert cli("evidence", "verify", str(genuine), who=None).returncode == 0
    done = cli("evidence", "verify", str(forged_file), who=None)
    assert done.returncode == 1
    assert f"signed with key {forger}, not the portal's" in done.stdout
    # A key file saved from the portal pins it as well; the forger's own key is no help.
    key_file = tmp_path / "portal-key.json"
    key_file.write_text(json.dumps({"public_key": published["public_key"]}))
    done = cli("evidence", "verify", str(forged_file), "--key", str(key_file), who=None)
    assert done.returncode == 1 and "not the portal's" in done.stdout

    # A fingerprint pinned at login (a fingerprint in the config) works the same.
    login = cli(
        "login",
        "--token-stdin",
        "--evidence-key",
        published["key_fingerprint"],
        stdin=cli.tokens["alice"] + "\n",
        who=None,
    )
    assert login.returncode == 0, login.stderr
    saved = json.loads((cli.home / "lora-portal" / "config.json").read_text())
    assert saved["evidence_keys"] == [published["key_fingerprint"]]
    assert cli("evidence", "verify", str(genuine), who=None).returncode == 0
    assert cli("evidence", "verify", str(forged_file), who=None).returncode == 1


def test_evidence_to_stdout_and_another_tenants_version_is_404(cli, tmp_path):
    ref = released(cli, tmp_path)
    done = cli("evidence", ref)
    assert done.returncode == 0 and isinstance(json.loads(done.stdout), dict)
    done = cli("evidence", ref, who="charlie")
    assert done.returncode == 2 and "(HTTP 404)" in done.stderr
    assert cli("evidence", "verify", who=None).returncode == 4


def test_audit_export_streams_jsonl_and_csv_filtered(cli, tmp_path):
    released(cli, tmp_path)
    out = tmp_path / "audit.jsonl"
    summary = cli.json("audit", "export", "--tenant", "acme", "-o", str(out))
    lines = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert summary["bytes"] == out.stat().st_size and lines
    approvals = tmp_path / "approvals.csv"
    done = cli(
        "audit",
        "export",
        "--format",
        "csv",
        "--tenant",
        "acme",
        "--action",
        "version.approve",
        "-o",
        str(approvals),
    )
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(approvals.open()))
    assert len(rows) == 1 and rows[0]["action"] == "version.approve"
    # To stdout too.
    done = cli("audit", "export", "--tenant", "acme", "--action", "version.release")
    assert done.returncode == 0
    assert [json.loads(x)["action"] for x in done.stdout.splitlines() if x] == ["version.release"]


def test_audit_export_of_another_tenant_is_refused_and_leaves_no_file(cli, tmp_path):
    out = tmp_path / "globex.jsonl"
    done = cli("audit", "export", "--tenant", "globex", "-o", str(out))
    assert done.returncode == 2 and "(HTTP 404)" in done.stderr
    assert not out.exists() and not (tmp_path / "globex.jsonl.part").exists()


def test_cost_for_the_platform_and_for_one_tenant(cli, tmp_path, live_world):
    from tests.client.conftest import issue_token

    released(cli, tmp_path)
    cli.tokens["adam"] = issue_token(live_world, "adam", ["read"])
    body = cli.json("cost", "--from", "2026-12-01", "--to", "2026-12-31", who="adam")
    assert (body["from"], body["to"]) == ("2026-12-01", "2026-12-31")
    assert "tenants" in body
    assert cli("cost", "--tenant", "acme", who="alice").returncode == 0
    # Another tenant's cost: the API's 404, exit 2.
    error = cli.json("cost", "--tenant", "acme", who="charlie", code=2)
    assert error["error"]["status"] == 404
