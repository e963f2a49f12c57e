"""Each command against a live portal: its happy path, and the errors a pipeline acts on
(exit codes in client/lora_portal_client/errors.py and docs/cli.md)."""

from __future__ import annotations

import json
import stat

import pytest

from adapters.models import AdapterVersion
from core.audit_models import AuditEvent
from tests.client.steps import push, pushed_and_validated, released, write_private_key
from tests.factories import adapter_files

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_logs_in_with_a_password_into_an_owner_only_file(cli, live_world):
    from tests.factories import PASSWORD

    done = cli(
        "login",
        "--username",
        "alice",
        "--password-stdin",
        "--scopes",
        "read",
        stdin=PASSWORD + "\n",
        who=None,
    )
    assert done.returncode == 0, done.stderr
    config = cli.home / "lora-portal" / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    assert json.loads(config.read_text())["token"].startswith("lp_")
    me = cli.json("whoami", who=None)  # from the file alone
    assert me["username"] == "alice"
    assert me["memberships"] == [{"tenant": "acme", "role": "owner"}]
    assert me["token"]["scopes"] == ["read"]


def test_a_wrong_password_or_a_bad_token_exits_5_with_the_apis_code(cli):
    done = cli("login", "--username", "alice", "--password-stdin", stdin="nope\n", who=None)
    assert done.returncode == 5
    assert "auth.invalid_credentials (HTTP 401)" in done.stderr
    error = cli.json("whoami", who=None, code=5, LORA_PORTAL_TOKEN="lp_abc_notatoken")
    assert error["error"]["status"] == 401 and error["error"]["code"] == "not_authenticated"
    assert cli.json("whoami", who=None, code=5)["error"]["code"] == "auth.no_token"


def test_whoami_shows_roles_and_the_tokens_scopes(cli):
    done = cli("whoami", who="rita")
    assert done.returncode == 0, done.stderr
    assert "rita at http://127.0.0.1" in done.stdout
    assert "platform roles: reviewer" in done.stdout
    assert "read, approve" in done.stdout or "approve, read" in done.stdout


def test_push_prints_the_version_and_wait_follows_it_to_validated(cli, tmp_path):
    done = push(cli, adapter_files(tmp_path / "a"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "acme/support@1"
    version = cli.json("wait", "acme/support@1", "--timeout", "120", "--interval", "0.2")
    assert version["status"] == "validated"
    uploader = AdapterVersion.objects.get(number=1).uploaded_by
    assert uploader is not None and uploader.username == "bob"


def test_push_wait_exits_2_on_a_rejected_version_with_its_codes(cli, tmp_path, live_world):
    live_world.acme.require_signatures = True
    live_world.acme.save()
    done = push(cli, adapter_files(tmp_path / "unsigned"), extra=("--wait",))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "acme/support@1" in done.stdout
    assert "version.rejected" in done.stderr and "signature.missing" in done.stderr
    error = cli.json("wait", "acme/support@1", code=2)
    assert [e["code"] for e in error["error"]["details"]["errors"]] == ["signature.missing"]
    assert error["error"]["details"]["version"] == "acme/support@1"


def test_wait_exits_3_when_time_runs_out(cli, tmp_path):
    ref = pushed_and_validated(cli, tmp_path)
    error = cli.json("wait", ref, "--until", "active", "--timeout", "0", code=3)
    assert error["error"]["code"] == "wait.timeout"
    assert error["error"]["details"] == {"version": ref, "status": "validated"}


def test_another_tenants_adapter_is_the_apis_404(cli, tmp_path):
    done = push(cli, adapter_files(tmp_path / "a"), who="alice", adapter="globex/legal")
    assert done.returncode == 2
    assert "tenant.not_found (HTTP 404)" in done.stderr
    error = cli.json("versions", "globex/legal", code=2)
    assert error["error"]["status"] == 404
    assert not AdapterVersion.objects.filter(tenant__slug="globex").exists()


def test_bad_arguments_and_missing_files_are_usage_errors(cli, tmp_path):
    assert cli("wait", "acme-support-1").returncode == 4
    empty = tmp_path / "empty"
    empty.mkdir()
    done = cli("push", str(empty), "--tenant", "acme", "--adapter", "support", "--json")
    assert done.returncode == 4
    assert json.loads(done.stdout)["error"]["code"] == "push.missing_files"
    assert cli("alias", "set", "acme/bot", "support@1").returncode == 4  # no weight


def test_review_release_and_disable_through_the_cli(cli, tmp_path):
    ref = pushed_and_validated(cli, tmp_path)
    # bob's token cannot approve (no `approve` scope): the API's code is shown, exit 2.
    done = cli("approve", ref, who="bob")
    assert done.returncode == 2 and "token.missing_scope" in done.stderr
    done = cli("approve", ref, "--comment", "checked", who="rita")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == [ref, "staged"]
    assert cli.json("release", ref)["status"] == "active"
    status = cli.json("status", ref)
    assert [d["kind"] for d in status["decisions"]] == ["approve", "release"]
    assert status["decisions"][0]["comment"] == "checked"
    assert cli.json("disable", ref, "--reason", "done")["status"] == "disabled"
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"version.approve", "version.release", "version.disable"} <= actions


def test_reject_needs_a_reason_and_records_it(cli, tmp_path):
    ref = pushed_and_validated(cli, tmp_path)
    # The portal decides what a rejection needs; its code and message are shown.
    done = cli("reject", ref, who="rita")
    assert done.returncode == 2 and "rejection.reason_required (HTTP 400)" in done.stderr
    assert cli.json("reject", ref, "--reason", "bad data", who="rita")["status"] == "rejected"
    error = cli.json("wait", ref, code=2)
    assert {"code": "decision.reject", "message": "rita: bad data"} in error["error"]["details"][
        "errors"
    ]


def test_aliases_set_weights_promote_and_rollback(cli, tmp_path):
    assert [released(cli, tmp_path, seed=seed) for seed in (1, 2)] == [
        "acme/support@1",
        "acme/support@2",
    ]
    done = cli("alias", "set", "acme/bot", "support@1=100", "--reason", "first")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "acme/bot -> support@1=100"
    found = cli.json("alias", "weights", "acme/bot", "support@1=90", "support@2=10")
    assert [(t["version"], t["weight"]) for t in found["targets"]] == [
        ("support@1", 90),
        ("support@2", 10),
    ]
    found = cli.json("alias", "promote", "acme/bot", "support@2")
    assert [(t["version"], t["weight"]) for t in found["targets"]] == [("support@2", 100)]
    found = cli.json("alias", "rollback", "acme/bot")
    assert [t["version"] for t in found["targets"]] == ["support@1", "support@2"]
    # Weights that do not add up: the API's code and message, nothing changed.
    error = cli.json("alias", "set", "acme/bot", "support@1=50", code=2)
    assert error["error"]["code"] == "alias.bad_weights"
    assert "add up to 100" in error["error"]["message"]
    assert (
        cli.json("alias", "weights", "acme/nobot", "support@1=100", code=2)["error"]["status"]
        == 404
    )


def test_versions_and_usage(cli, tmp_path):
    ref = pushed_and_validated(cli, tmp_path)
    done = cli("versions", "acme/support")
    assert done.returncode == 0 and done.stdout.startswith(f"{ref}  validated  acme--support--v1-")
    usage = cli.json("usage", "--tenant", "acme", "--from", "2026-01-01", "--to", "2026-01-31")
    assert usage == {"tenant": "acme", "from": "2026-01-01", "to": "2026-01-31", "rows": []}
    done = cli("usage", "--tenant", "acme", "--csv")
    assert done.returncode == 0 and done.stdout.splitlines()[0].startswith("day,")
    # Usage is billing data: a maintainer is refused (403), exit 2.
    assert cli.json("usage", "--tenant", "acme", who="bob", code=2)["error"]["status"] == 403
    assert cli("usage", "--from", "yesterday").returncode == 4


def test_push_sign_is_verified_by_the_portal_and_names_the_signer(cli, tmp_path, live_world):
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key_path = tmp_path / "release.pem"
    public = write_private_key(ed25519.Ed25519PrivateKey.generate(), key_path)
    alice = live_world.client("alice")
    response = alice.post(
        "/api/v1/tenants/acme/signing-keys/",
        {"name": "release", "public_key_pem": public.decode()},
        format="json",
    )
    assert response.status_code == 201, response.json()
    live_world.acme.require_signatures = True
    live_world.acme.save()
    directory = adapter_files(tmp_path / "a")
    done = push(cli, directory, extra=("--sign", str(key_path), "--wait", "--json"))
    assert done.returncode == 0, (done.stdout, done.stderr)
    version = json.loads(done.stdout)
    assert version["status"] == "validated" and version["signer"] == "release"
    # A key that is not a private key is a usage error, and nothing is uploaded.
    done = push(cli, directory, extra=("--sign", str(tmp_path / "a" / "adapter_config.json")))
    assert done.returncode == 4 and "sign.key_invalid" in done.stderr
    assert AdapterVersion.objects.count() == 1
