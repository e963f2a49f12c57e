"""A forger's copy of a compliance record: its served totals zeroed, its digests recomputed and
the whole re-signed with a key of the forger's own, so only the signer's key gives it away."""

from __future__ import annotations

import base64
import copy
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from lora_portal_client.evidence import (
    SECTIONS,
    canonical_bytes,
    key_fingerprint,
    section_digest,
    signed_part,
)


def forged_copy(record: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the forged record, the forger's key fingerprint)."""
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
    return forged, key_fingerprint(raw)
