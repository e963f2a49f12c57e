"""Where the portal's URL and the token come from: the environment first, then the config file;
and the evidence keys pinned there (`evidence_keys`: the portal's public keys that `login`
fetched, or `sha256:` fingerprints; `evidence verify` checks records against them).

The file is $XDG_CONFIG_HOME/lora-portal/config.json (default ~/.config/...), written 0600 in a
0700 directory, never through a symbolic link: it holds a bearer token.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
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
    return Settings(
        url=str(url).rstrip("/"),
        token=str(token) if token else None,
        evidence_keys=tuple(str(k) for k in keys) if isinstance(keys, list) else (),
    )


def save_settings(*, url: str, token: str, evidence_keys: list[str] | None = None) -> Path:
    path = config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    body: dict[str, object] = {"url": url.rstrip("/"), "token": token}
    if evidence_keys:
        body["evidence_keys"] = evidence_keys
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
