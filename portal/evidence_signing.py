"""The portal's evidence keys: the Ed25519 key that signs compliance records (portal.evidence),
and the public halves of the keys it signed with before (a rotation keeps old records verifying).

The signing seed is EVIDENCE_SIGNING_KEY, the older public keys EVIDENCE_VERIFY_KEYS (settings).
GET /api/v1/evidence/key/ publishes the current key and the older ones, so an auditor pins them
when verifying a record offline (`lora-portal login` saves them; `evidence verify --key URL`
fetches them). The serialisation that is signed is the client's own
(lora_portal_client.evidence.canonical_bytes), so the portal and the offline verifier cannot
drift apart.
"""

from __future__ import annotations

import base64
from functools import cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings

from core.errors import ApplicationError


@cache
def _private_key(seed_hex: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed_hex))


def require_signing_key() -> None:
    """Refuses (503) while EVIDENCE_SIGNING_KEY is not set: outside debug it has no default."""
    if not settings.EVIDENCE_SIGNING_KEY:
        raise ApplicationError(
            "evidence.signing_key_missing",
            "This portal has no evidence signing key (EVIDENCE_SIGNING_KEY): it cannot sign "
            "compliance records until an operator sets one.",
            status=503,
        )


def _key() -> Ed25519PrivateKey:
    require_signing_key()
    return _private_key(settings.EVIDENCE_SIGNING_KEY)


def public_key_raw() -> bytes:
    return _key().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def public_key_b64() -> str:
    return base64.b64encode(public_key_raw()).decode()


def _described(public_key: str) -> dict[str, str]:
    from lora_portal_client.evidence import SIGNATURE_ALGORITHM, key_fingerprint

    return {
        "algorithm": SIGNATURE_ALGORITHM,
        "public_key": public_key,
        "key_fingerprint": key_fingerprint(base64.b64decode(public_key)),
    }


def portal_keys() -> list[str]:
    """Every public key (base64) a genuine record of this portal may be signed with: the
    current one first (none while EVIDENCE_SIGNING_KEY is unset), then the older ones."""
    current = [public_key_b64()] if settings.EVIDENCE_SIGNING_KEY else []
    return [*current, *(k for k in settings.EVIDENCE_VERIFY_KEYS if k not in current)]


def published_key() -> dict[str, Any]:
    """The current key as a record's signature block names it (algorithm, public_key,
    key_fingerprint), and `keys`: it and the older ones, each marked current or not."""
    keys = portal_keys()
    has_current = bool(settings.EVIDENCE_SIGNING_KEY)
    current = _described(keys[0]) if has_current else {"public_key": None, "key_fingerprint": None}
    return {
        **current,
        "keys": [
            {**_described(key), "current": has_current and i == 0} for i, key in enumerate(keys)
        ],
    }


def sign_record(unsigned: dict[str, Any]) -> dict[str, Any]:
    """The record with its section digests and the signature over everything else."""
    from lora_portal_client.evidence import SECTIONS, canonical_bytes, section_digest

    record = {**unsigned, "digests": {name: section_digest(unsigned[name]) for name in SECTIONS}}
    value = _key().sign(canonical_bytes(record))
    signer = _described(public_key_b64())
    return {**record, "signature": {**signer, "value": base64.b64encode(value).decode()}}
