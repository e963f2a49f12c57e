"""The portal's evidence key: an Ed25519 key that signs compliance records (portal.evidence).

Its seed is EVIDENCE_SIGNING_KEY (settings); its public half is published at
GET /api/v1/evidence/key/ so an auditor can pin it when verifying a record offline. The
serialisation that is signed is the client's own (lora_portal_client.evidence.canonical_bytes),
so the portal and the offline verifier cannot drift apart.
"""

from __future__ import annotations

import base64
from functools import cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings


@cache
def _private_key(seed_hex: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed_hex))


def _key() -> Ed25519PrivateKey:
    return _private_key(settings.EVIDENCE_SIGNING_KEY)


def public_key_raw() -> bytes:
    return _key().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def public_key_b64() -> str:
    return base64.b64encode(public_key_raw()).decode()


def published_key() -> dict[str, str]:
    from lora_portal_client.evidence import SIGNATURE_ALGORITHM, key_fingerprint

    return {
        "algorithm": SIGNATURE_ALGORITHM,
        "public_key": public_key_b64(),
        "key_fingerprint": key_fingerprint(public_key_raw()),
    }


def sign_record(unsigned: dict[str, Any]) -> dict[str, Any]:
    """The record with its section digests and the signature over everything else."""
    from lora_portal_client.evidence import SECTIONS, canonical_bytes, section_digest

    record = {**unsigned, "digests": {name: section_digest(unsigned[name]) for name in SECTIONS}}
    value = _key().sign(canonical_bytes(record))
    return {**record, "signature": {**published_key(), "value": base64.b64encode(value).decode()}}
