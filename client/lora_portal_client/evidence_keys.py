"""The keys `evidence verify` pins a record to: `--key FILE|URL|FINGERPRINT`, else those saved in
the config file (`login` fetches the portal's published keys once and saves them there)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_public_key,
)

from lora_portal_client.client import Client, same_origin
from lora_portal_client.config import Settings
from lora_portal_client.errors import usage_error
from lora_portal_client.evidence import PinnedKeys


def _from_text(text: str, source: str) -> PinnedKeys:
    """The key endpoint's JSON, a PEM public key, or base64 keys / fingerprints, one a line."""
    text = text.strip()
    try:
        if text.startswith("{"):
            return PinnedKeys.from_published(json.loads(text))
        if text.startswith("-----BEGIN"):
            key = load_pem_public_key(text.encode())
            if not isinstance(key, Ed25519PublicKey):
                raise ValueError("not an Ed25519 public key")
            raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
            return PinnedKeys.parse([base64.b64encode(raw).decode()])
        return PinnedKeys.parse(line for line in text.splitlines() if line.strip())
    except ValueError as exc:
        raise usage_error("evidence.bad_key", f"{source}: no evidence key in it ({exc}).") from None


def _fetch(url: str, settings: Settings) -> PinnedKeys:
    # The token goes only to the portal it belongs to.
    token = settings.token if same_origin(url, settings.url) else None
    with Client(url, token, timeout=30.0) as client:
        return _from_text(client.request("GET", url).text, url)


def pinned_from_option(value: str, settings: Settings) -> PinnedKeys:
    """`--key`: a `sha256:` fingerprint, an http(s) URL (the portal's GET /api/v1/evidence/key/),
    or a file holding any of what _from_text reads."""
    if value.lower().startswith("sha256:"):
        return _from_text(value, "--key")
    if value.startswith(("https://", "http://")):
        return _fetch(value, settings)
    try:
        text = Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise usage_error("evidence.bad_key", f"--key {value}: cannot be read ({exc}).") from None
    return _from_text(text, value)


def pinned_from_config(settings: Settings) -> PinnedKeys | None:
    if not settings.evidence_keys:
        return None
    return _from_text("\n".join(settings.evidence_keys), "the config file's evidence_keys")


def published_keys(client: Client) -> list[str]:
    """The portal's published evidence keys (current and older), to pin at login."""
    body = client.evidence_keys()
    keys = [k.get("public_key") for k in body.get("keys") or [] if isinstance(k, dict)]
    if not keys and body.get("public_key"):
        keys = [body["public_key"]]
    PinnedKeys.parse(str(k) for k in keys)  # ValueError: nothing usable
    return [str(k) for k in keys]
