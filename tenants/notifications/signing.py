"""How a webhook body is signed, and how a receiver checks it (no Django: receivers may copy it).

The signature is HMAC-SHA256 with the endpoint's secret over `<timestamp>.<body>`, sent as
`X-LoRA-Portal-Signature: sha256=<hex>` beside `X-LoRA-Portal-Timestamp: <unix seconds>`; the
timestamp in the signed text lets a receiver refuse a replayed old post.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SIGNATURE_HEADER = "X-LoRA-Portal-Signature"
TIMESTAMP_HEADER = "X-LoRA-Portal-Timestamp"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(
    secret: str, timestamp: str, body: bytes, header: str, *, now: float, tolerance: int = 300
) -> bool:
    """What a receiver runs: the signature matches and the timestamp is within `tolerance` s."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs(now - sent) > tolerance:
        return False
    return hmac.compare_digest(signature(secret, sent, body), header)
