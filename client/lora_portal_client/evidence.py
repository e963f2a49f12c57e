"""Verifying a version's compliance record offline (`lora-portal evidence verify FILE`).

A record is what `GET .../versions/{n}/evidence/` answers. The portal signs it with its evidence
key (Ed25519); the public half is published at `GET /api/v1/evidence/key/` and in every record.
A plain digest would not do: whoever changes a record can recompute a digest, not a signature.

Offline, this checks that the record is whole and unchanged since the portal signed it: each
section against its digest, the digests and the rest against the signature, the served totals
against their days, and the audit events against the chain anchor taken at export time. Who
signed is only shown against keys pinned beforehand (`PinnedKeys`: the portal's published keys,
current and old, or their fingerprints): anyone can edit a record and re-sign it with a key of
their own, so a record checked against no pinned key never verifies ("signature not checked
against the portal's key"). `manage.py audit_verify --evidence FILE` runs this pinned to the
portal's own keys and then checks the record against the live audit chain (the chain's HMAC key
never leaves the portal, so the events' own hashes can only be recomputed there).

Pure Python: the standard library and `cryptography`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

RECORD_FORMAT = "lora-portal.evidence/1"
SIGNATURE_ALGORITHM = "ed25519"
NOT_PINNED = (
    "signature not checked against the portal's key: pin it with --key FILE|URL|FINGERPRINT, "
    "or `lora-portal login` (which saves the portal's published keys)"
)
# The sections each carry a digest inside the signed part, so a problem names what changed.
SECTIONS = (
    "version",
    "validation",
    "decisions",
    "releases",
    "served",
    "evals",
    "audit_events",
    "anchor",
)
# Sections a record made before they existed lacks (its signature covers that it lacks them).
OPTIONAL_SECTIONS = frozenset({"evals"})
# Fields each exported audit event carries (the chain's own fields, core/audit.py).
AUDIT_EVENT_FIELDS = (
    "id",
    "created_at",
    "actor",
    "actor_id",
    "tenant",
    "tenant_id",
    "action",
    "object_type",
    "object_id",
    "before",
    "after",
    "request_id",
    "prev_hash",
    "hash",
)


def canonical_bytes(value: Any) -> bytes:
    """The one serialisation that is digested and signed: the portal signs with this function."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def section_digest(value: Any) -> str:
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def signed_part(record: dict[str, Any]) -> dict[str, Any]:
    """Everything but the signature block."""
    return {name: value for name, value in record.items() if name != "signature"}


def key_fingerprint(raw_public_key: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw_public_key).hexdigest()


def _decode_key(text: str) -> bytes | None:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError):
        return None
    return raw if len(raw) == 32 else None


def _fingerprint_of(entry: str) -> str:
    """A pinned entry (a base64 Ed25519 public key or a `sha256:` fingerprint) as a fingerprint."""
    entry = entry.strip()
    if entry.lower().startswith("sha256:"):
        digest = entry[len("sha256:") :].lower()
        if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
            return "sha256:" + digest
        raise ValueError(f"{entry!r} is not a sha256: fingerprint (64 hex digits)")
    raw = _decode_key(entry)
    if raw is None:
        raise ValueError(f"{entry!r} is neither a base64 Ed25519 public key nor a fingerprint")
    return key_fingerprint(raw)


@dataclass(frozen=True)
class PinnedKeys:
    """The keys a genuine record may be signed with, as fingerprints: a fingerprint pins a key
    as well as the key itself does (the record carries its key; its fingerprint must be one of
    these). Several, because the portal still publishes the keys it signed with before a
    rotation."""

    fingerprints: frozenset[str]
    # fingerprint -> ISO time from which the key no longer verifies: the portal retired it (it
    # signs with another), so a record made since cannot be the portal's.
    retired: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, entries: Iterable[str], retired: Mapping[str, str] | None = None) -> PinnedKeys:
        """From base64 public keys and `sha256:` fingerprints; ValueError names a bad one."""
        fingerprints = frozenset(_fingerprint_of(entry) for entry in entries)
        if not fingerprints:
            raise ValueError("no key to pin")
        return cls(fingerprints, dict(retired or {}))

    @classmethod
    def from_published(cls, body: Any) -> PinnedKeys:
        """From what `GET /api/v1/evidence/key/` answers: the current key and the older ones."""
        if not isinstance(body, dict):
            raise ValueError("not the portal's published evidence keys (a JSON object)")
        keys = body.get("keys")
        entries = [k.get("public_key", "") for k in keys if isinstance(k, dict)] if keys else []
        if isinstance(body.get("public_key"), str):
            entries.append(body["public_key"])
        return cls.parse(entries)

    def describe(self) -> str:
        return ", ".join(sorted(self.fingerprints))


def _check_signature(record: dict[str, Any], pinned: PinnedKeys | None) -> list[str]:
    block = record.get("signature")
    if not isinstance(block, dict):
        return ["signature: missing; the record cannot be shown to come from the portal"]
    if block.get("algorithm") != SIGNATURE_ALGORITHM:
        return [f"signature: algorithm {block.get('algorithm')!r} is not {SIGNATURE_ALGORITHM}"]
    embedded = _decode_key(str(block.get("public_key", "")))
    if embedded is None:
        return ["signature: public_key is not a base64 Ed25519 key"]
    problems = []
    signer = key_fingerprint(embedded)
    if block.get("key_fingerprint") != signer:
        problems.append("signature: key_fingerprint does not match public_key")
    if pinned is None:
        problems.append(NOT_PINNED)
    elif signer not in pinned.fingerprints:
        problems.append(
            f"signature: the record was signed with key {signer}, not the portal's "
            f"({pinned.describe()})"
        )
    elif signer in pinned.retired:
        problems += _retired_key_problem(record, signer, pinned.retired[signer])
    try:
        value = base64.b64decode(str(block.get("value", "")), validate=True)
        Ed25519PublicKey.from_public_bytes(embedded).verify(
            value, canonical_bytes(signed_part(record))
        )
    except (binascii.Error, ValueError, InvalidSignature):
        problems.append(
            "signature: does not match the record's content (the record was changed after "
            "the portal signed it, or signed by another key)"
        )
    return problems


def _instant(text: Any) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _retired_key_problem(record: dict[str, Any], signer: str, retired_at: str) -> list[str]:
    """A retired key verifies only the records made before it was retired."""
    made, since = _instant(record.get("generated_at")), _instant(retired_at)
    if made is not None and since is not None and made < since:
        return []
    return [
        f"signature: the record (made {record.get('generated_at')}) was signed with key "
        f"{signer}, which the portal retired by {retired_at}: a retired key verifies only "
        "records made before then"
    ]


def _check_digests(record: dict[str, Any]) -> list[str]:
    digests = record.get("digests")
    if not isinstance(digests, dict):
        return ["digests: missing"]
    problems = []
    for name in SECTIONS:
        if name in OPTIONAL_SECTIONS and name not in record and name not in digests:
            continue
        if name not in record:
            problems.append(f"{name}: missing")
        elif digests.get(name) != section_digest(record[name]):
            problems.append(f"{name}: content differs from its digest (changed after export)")
    return problems


def _check_served(served: Any) -> list[str]:
    if not isinstance(served, dict) or not isinstance(served.get("by_day"), list):
        return ["served: missing its by_day rows"]
    problems = []
    for total in ("requests", "prompt_tokens", "completion_tokens"):
        summed = sum(int(day.get(total, 0)) for day in served["by_day"])
        if served.get(total) != summed:
            problems.append(
                f"served: {total} is {served.get(total)} but its days add up to {summed}"
            )
    return problems


def _check_audit(events: Any, anchor: Any) -> list[str]:
    if not isinstance(events, list) or not isinstance(anchor, dict):
        return ["audit_events or anchor: malformed"]
    head = anchor.get("chain_head") or {}
    head_id = head.get("event_id")
    if not isinstance(head_id, int):
        return ["anchor: no chain head"]
    problems = []
    checkpoint = anchor.get("checkpoint")
    if isinstance(checkpoint, dict) and int(checkpoint.get("event_id", 0)) > head_id:
        problems.append("anchor: the checkpoint is ahead of the chain head")
    previous_id = 0
    for event in events:
        missing = [name for name in AUDIT_EVENT_FIELDS if name not in event]
        if missing:
            problems.append(f"audit event {event.get('id')}: missing {', '.join(missing)}")
            continue
        if not isinstance(event["id"], int) or event["id"] <= previous_id:
            problems.append(f"audit event {event['id']}: out of order")
        elif event["id"] > head_id:
            problems.append(f"audit event {event['id']}: after the anchored chain head #{head_id}")
        previous_id = event["id"] if isinstance(event["id"], int) else previous_id
    return problems


def verify_record(
    record: dict[str, Any], *, pinned: PinnedKeys | None = None, public_key: str | None = None
) -> list[str]:
    """The problems found in a compliance record; [] means it verifies.

    `pinned` (or one base64 `public_key`): the portal's keys; without them the record does not
    verify, whatever its signature, since anyone can sign."""
    if public_key is not None:
        try:
            pinned = PinnedKeys.parse([public_key])
        except ValueError:
            return ["the trusted public key given is not a base64 Ed25519 key"]
    if not isinstance(record, dict):
        return ["the record is not a JSON object"]
    if record.get("format") != RECORD_FORMAT:
        return [f"format: {record.get('format')!r} is not {RECORD_FORMAT}"]
    return [
        *_check_signature(record, pinned),
        *_check_digests(record),
        *_check_served(record.get("served")),
        *_check_audit(record.get("audit_events"), record.get("anchor")),
    ]


def verify_file(
    path: str | Path, *, pinned: PinnedKeys | None = None, public_key: str | None = None
) -> list[str]:
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        return [f"{path}: cannot be read ({exc.strerror or exc})"]
    except (UnicodeDecodeError, ValueError) as exc:
        return [f"{path}: not a JSON record ({exc})"]
    return verify_record(record, pinned=pinned, public_key=public_key)
