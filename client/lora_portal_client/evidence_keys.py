"""The keys `evidence verify` pins a record to: `--key FILE|URL|FINGERPRINT`, else those saved in
the config file (`login` fetches the portal's published keys and saves them there, and each
`evidence verify` refreshes them from the same place: a key the portal rotated away from is kept
as retired, verifying only records made before it was seen retired; a key it no longer publishes
is dropped; its new key is pinned)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_public_key,
)

from lora_portal_client.client import Client, same_origin
from lora_portal_client.config import (
    EvidencePins,
    Settings,
    plain_http_warning,
    save_evidence_pins,
)
from lora_portal_client.errors import PortalError, usage_error
from lora_portal_client.evidence import PinnedKeys, key_fingerprint


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


def _fetch_text(url: str, settings: Settings) -> str:
    # The token goes only to the portal it belongs to.
    token = settings.token if same_origin(url, settings.url) else None
    with Client(url, token, timeout=30.0) as client:
        return client.request("GET", url).text


def key_url_warning(value: str) -> str | None:
    """A warning for a key fetched over plain http:// from another machine: whoever is on the
    path can answer with a key of their own, and every record they sign would then verify."""
    if not value.startswith("http://") or plain_http_warning(value) is None:
        return None
    return (
        f"--key {value} fetches the portal's evidence key over plain http://: anyone on the "
        "path can answer with a key of their own, and records they sign would verify. Use "
        "https:// or pin a sha256: fingerprint."
    )


def pinned_from_option(
    value: str, settings: Settings, warn: Callable[[str], None] | None = None
) -> PinnedKeys:
    """`--key`: a `sha256:` fingerprint, an http(s) URL (the portal's GET /api/v1/evidence/key/),
    or a file holding any of what _from_text reads."""
    if value.lower().startswith("sha256:"):
        return _from_text(value, "--key")
    if value.startswith(("https://", "http://")):
        warning = key_url_warning(value)
        if warning and warn is not None:
            warn(f"warning: {warning}")
        return _from_text(_fetch_text(value, settings), value)
    try:
        text = Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise usage_error("evidence.bad_key", f"--key {value}: cannot be read ({exc}).") from None
    return _from_text(text, value)


def pinned_from_config(settings: Settings) -> PinnedKeys | None:
    if not settings.evidence_keys:
        return None
    pinned = _from_text("\n".join(settings.evidence_keys), "the config file's evidence_keys")
    return PinnedKeys(pinned.fingerprints, dict(settings.evidence_keys_retired))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def pins_from_published(
    body: Any, *, source: str | None, retired_before: Mapping[str, str] | None = None
) -> EvidencePins:
    """What to pin of the portal's published keys (GET /api/v1/evidence/key/): all of them; the
    ones it no longer signs with as retired, since when they were first seen so (now, for a key
    seen retired for the first time)."""
    if not isinstance(body, dict):
        raise ValueError("not the portal's published evidence keys (a JSON object)")
    listed = [k for k in body.get("keys") or [] if isinstance(k, dict) and k.get("public_key")]
    if not listed and isinstance(body.get("public_key"), str):
        listed = [{"public_key": body["public_key"], "current": True}]
    keys = [str(k["public_key"]) for k in listed]
    PinnedKeys.parse(keys)  # ValueError: nothing usable
    before = dict(retired_before or {})
    now = _now()
    retired = {}
    for entry in listed:
        if entry.get("current"):
            continue
        fingerprint = key_fingerprint(base64.b64decode(str(entry["public_key"])))
        retired[fingerprint] = before.get(fingerprint, now)
    return EvidencePins(keys=keys, retired=retired, source=source)


def published_pins(client: Client, source: str) -> EvidencePins:
    """The portal's published evidence keys (current and older), to pin at login."""
    return pins_from_published(client.evidence_keys(), source=source)


def refreshed_pins(settings: Settings, warn: Callable[[str], None]) -> PinnedKeys | None:
    """The pins saved in the config file, refreshed first from where they came from (and saved
    again); offline, or when the portal cannot answer, the saved ones with a warning."""
    source = settings.evidence_keys_from
    if source is None or not settings.evidence_keys:
        return pinned_from_config(settings)
    try:
        body = json.loads(_fetch_text(source, settings))
        pins = pins_from_published(
            body, source=source, retired_before=settings.evidence_keys_retired
        )
    except (PortalError, httpx.HTTPError, ValueError) as exc:
        warn(
            f"warning: the pinned evidence keys could not be refreshed from {source} ({exc}); "
            "checking against the ones saved before."
        )
        return pinned_from_config(settings)
    save_evidence_pins(pins)
    return PinnedKeys.parse(pins.keys, pins.retired)
