"""Where the portal's URL and the token come from: the environment first, then the config file.

The file is $XDG_CONFIG_HOME/lora-portal/config.json (default ~/.config/...), written 0600 in a
0700 directory: it holds a bearer token.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from lora_portal_client.errors import ExitCode, PortalError, usage_error

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
    return Settings(url=str(url).rstrip("/"), token=str(token) if token else None)


def save_settings(*, url: str, token: str) -> Path:
    path = config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    # Created 0600 before anything is written: the token is never readable by others, not even
    # for a moment, and an existing file with looser rights is tightened first.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"url": url.rstrip("/"), "token": token}, out)
    return path


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
