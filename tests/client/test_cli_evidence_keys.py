"""The evidence keys `login` pins are refreshed from the portal before each `evidence verify`:
after the portal rotates its key, the new key verifies, and the retired one verifies only records
made before it was seen retired (whoever still holds it cannot make new ones that verify);
offline, the saved pins are used with a warning. `--key http://` to another machine warns.

The portal is real (uvicorn serving portal.asgi; a second one started with the rotated key plays
the portal after its restart); the records are signed here with the portal's seeds, as
portal.evidence_signing signs them, so each can carry the time it claims."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from lora_portal_client import paths
from lora_portal_client.evidence import (
    RECORD_FORMAT,
    SECTIONS,
    canonical_bytes,
    key_fingerprint,
    section_digest,
    signed_part,
)

from tests.fixtures.gateway import running_gateway

pytestmark = pytest.mark.django_db(transaction=True)

OLD_SEED = "7e57" * 16  # tests/settings.py: the live portal's EVIDENCE_SIGNING_KEY
NEW_SEED = "0123" * 16


def _public(seed: str) -> bytes:
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed))
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _record(seed: str, made: datetime, tmp_path: Path, name: str) -> Path:
    """A whole record made at `made`, signed with `seed`, saved as `name`."""
    record: dict[str, Any] = {
        "format": RECORD_FORMAT,
        "generated_at": made.isoformat(),
        "version": {"name": "acme/support@1"},
        "validation": {},
        "decisions": [],
        "releases": [],
        "served": {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "by_day": []},
        "evals": [],
        "audit_events": [],
        "anchor": {"chain_head": {"event_id": 1}},
    }
    record["digests"] = {section: section_digest(record[section]) for section in SECTIONS}
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed))
    raw = _public(seed)
    record["signature"] = {
        "algorithm": "ed25519",
        "public_key": base64.b64encode(raw).decode(),
        "key_fingerprint": key_fingerprint(raw),
        "value": base64.b64encode(key.sign(canonical_bytes(signed_part(record)))).decode(),
    }
    path = tmp_path / name
    path.write_text(json.dumps(record))
    return path


def _config(cli: Any) -> dict[str, Any]:
    return dict(json.loads((cli.home / "lora-portal" / "config.json").read_text()))


def test_a_rotated_key_is_pinned_and_the_retired_one_verifies_only_older_records(
    cli, tmp_path, celery_worker_process
):
    old, new = key_fingerprint(_public(OLD_SEED)), key_fingerprint(_public(NEW_SEED))
    login = cli("login", "--token-stdin", stdin=cli.tokens["alice"] + "\n", who=None)
    assert login.returncode == 0, login.stderr
    saved = _config(cli)
    assert saved["evidence_keys_from"] == cli.url + paths.EVIDENCE_KEY
    assert "evidence_keys_retired" not in saved  # the one key is current
    before = _record(OLD_SEED, datetime.now(UTC) - timedelta(hours=1), tmp_path, "before.json")
    assert cli("evidence", "verify", str(before), who=None).returncode == 0

    # The portal restarts with a new key and still publishes the old one: the config follows it
    # to its new address, as to the same portal.
    with running_gateway(
        celery_worker_process["queue"],
        EVIDENCE_SIGNING_KEY=NEW_SEED,
        EVIDENCE_VERIFY_KEYS=base64.b64encode(_public(OLD_SEED)).decode(),
    ) as rotated:
        moved = {**_config(cli), "url": rotated, "evidence_keys_from": rotated + paths.EVIDENCE_KEY}
        (cli.home / "lora-portal" / "config.json").write_text(json.dumps(moved))

        by_new = _record(NEW_SEED, datetime.now(UTC), tmp_path, "by-new.json")
        checked = cli.json("evidence", "verify", str(by_new), who=None, LORA_PORTAL_URL=rotated)
        assert checked["ok"] is True, checked
        assert sorted(checked["pinned"]) == sorted([old, new])
        retired_at = datetime.fromisoformat(_config(cli)["evidence_keys_retired"][old])
        assert new not in _config(cli)["evidence_keys_retired"]

        # The old key still verifies what it signed before it was retired...
        assert (
            cli("evidence", "verify", str(before), who=None, LORA_PORTAL_URL=rotated).returncode
            == 0
        )
        # ...and nothing made since: whoever kept it cannot make a record that verifies.
        after = _record(OLD_SEED, retired_at + timedelta(seconds=1), tmp_path, "after.json")
        refused = cli.json(
            "evidence", "verify", str(after), who=None, code=1, LORA_PORTAL_URL=rotated
        )
        assert any(f"{old}, which the portal retired by" in p for p in refused["problems"])
        # Seen retired once, it keeps that time at the next refresh.
        again = cli("evidence", "verify", str(before), who=None, LORA_PORTAL_URL=rotated)
        assert again.returncode == 0 and "warning" not in again.stderr, again.stderr
        assert datetime.fromisoformat(_config(cli)["evidence_keys_retired"][old]) == retired_at

    # The portal is gone: the saved pins, with a warning, and the retirement still holds.
    offline = cli("evidence", "verify", str(before), who=None)
    assert offline.returncode == 0, (offline.stdout, offline.stderr)
    assert "could not be refreshed" in offline.stderr
    assert cli("evidence", "verify", str(after), who=None).returncode == 1


def test_a_key_pinned_by_hand_is_not_refreshed(cli, tmp_path):
    made = datetime.now(UTC)
    record = _record(OLD_SEED, made, tmp_path, "record.json")
    fingerprint = key_fingerprint(_public(OLD_SEED))
    login = cli(
        "login", "--token-stdin", "--evidence-key", fingerprint,
        stdin=cli.tokens["alice"] + "\n", who=None,
    )  # fmt: skip
    assert login.returncode == 0, login.stderr
    assert _config(cli)["evidence_keys"] == [fingerprint]
    assert "evidence_keys_from" not in _config(cli)
    done = cli("evidence", "verify", str(record), who=None)
    assert done.returncode == 0 and "warning" not in done.stderr


def test_a_key_url_over_plain_http_to_another_machine_warns(cli, tmp_path):
    record = _record(OLD_SEED, datetime.now(UTC), tmp_path, "record.json")
    # The portal on this machine over http://: no warning.
    local = cli("evidence", "verify", str(record), "--key", cli.url + paths.EVIDENCE_KEY)
    assert local.returncode == 0 and "warning" not in local.stderr, local.stderr
    # Another machine: the request goes to a proxy on loopback that nobody serves, so nothing
    # leaves this machine; the warning comes before it.
    remote = cli(
        "evidence", "verify", str(record), "--key", "http://portal.example/api/v1/evidence/key/",
        who=None, HTTP_PROXY="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9",
        NO_PROXY="", no_proxy="",
    )  # fmt: skip
    assert remote.returncode != 0
    assert "fetches the portal's evidence key over plain http://" in remote.stderr
