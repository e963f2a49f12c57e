"""Where the portal's URL and the token come from: the environment first, then the config file;
and the evidence keys pinned there (`evidence_keys`: the portal's public keys that `login`
fetched, or `sha256:` fingerprints; `evidence verify` checks records against them). Keys fetched
from the portal are refreshed from the same place (`evidence_keys_from`) before each check, and
each key the portal no longer signs with is kept with the time it was first seen retired
(`evidence_keys_retired`, by fingerprint): it verifies only records made before then.

The file is $XDG_CONFIG_HOME/lora-portal/config.json (default ~/.config/...), written 0600 in a
0700 directory, never through a symbolic link: it holds a bearer token.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from lora_portal_client.errors import ExitCode, PortalError, usage_error
from lora_portal_client.files import private_file

TOKEN_ENV = "LORA_PORTAL_TOKEN"
URL_ENV = "LORA_PORTAL_URL"
DEFAULT_URL = "http://127.0.0.1:8000"


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "lora-portal" / "config.json"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str | None
    evidence_keys: tuple[str, ...] = ()
    # fingerprint -> ISO time the key was first seen retired (no longer the portal's current key)
    evidence_keys_retired: Mapping[str, str] = field(default_factory=dict)
    # The key endpoint the pins came from and are refreshed from (None: given by hand, kept).
    evidence_keys_from: str | None = None

    def require_token(self) -> str:
        if not self.token:
            raise PortalError(
                "auth.no_token",
                f"No token: run `lora-portal login` or set {TOKEN_ENV}.",
                exit_code=ExitCode.AUTH,
            )
        return self.token


def load_settings() -> Settings:
    stored = _read(config_path())
    url = os.environ.get(URL_ENV) or stored.get("url") or DEFAULT_URL
    token = os.environ.get(TOKEN_ENV) or stored.get("token")
    keys = stored.get("evidence_keys")
    retired = stored.get("evidence_keys_retired")
    source = stored.get("evidence_keys_from")
    return Settings(
        url=str(url).rstrip("/"),
        token=str(token) if token else None,
        evidence_keys=tuple(str(k) for k in keys) if isinstance(keys, list) else (),
        evidence_keys_retired=(
            {str(k): str(v) for k, v in retired.items()} if isinstance(retired, dict) else {}
        ),
        evidence_keys_from=str(source) if isinstance(source, str) and source else None,
    )


@dataclass(frozen=True)
class EvidencePins:
    """What the config file keeps of the portal's evidence keys (see the module's docstring)."""

    keys: list[str]
    retired: dict[str, str] = field(default_factory=dict)
    source: str | None = None

    def fields(self) -> dict[str, object]:
        body: dict[str, object] = {}
        if self.keys:
            body["evidence_keys"] = self.keys
        if self.retired:
            body["evidence_keys_retired"] = self.retired
        if self.source:
            body["evidence_keys_from"] = self.source
        return body


def save_settings(*, url: str, token: str, pins: EvidencePins | None = None) -> Path:
    body: dict[str, object] = {"url": url.rstrip("/"), "token": token}
    return _write({**body, **(pins.fields() if pins else {})})


def save_evidence_pins(pins: EvidencePins) -> Path:
    """The refreshed pins, the rest of the config file as it is."""
    stored = {k: v for k, v in _read(config_path()).items() if not k.startswith("evidence_keys")}
    return _write({**stored, **pins.fields()})


def _write(body: dict[str, object]) -> Path:
    path = config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    # Written 0600 from its first byte, then renamed into place: the token is never readable
    # by others, not even for a moment, and never written through a link.
    with private_file(path) as out:
        out.write(json.dumps(body).encode())
    return path


def plain_http_warning(url: str) -> str | None:
    """A warning when the token would cross the network unencrypted: http:// to a host that is
    not this machine."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        return None
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass
    return (
        f"{url} is plain http:// to another machine: the token and everything else travel "
        "unencrypted; use https://"
    )


def _read(path: Path) -> dict[str, object]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        stored = json.loads(text)
    except ValueError:
        raise usage_error(
            "config.invalid", f"{path} is not JSON; remove it and log in again."
        ) from None
    return stored if isinstance(stored, dict) else {}
