"""Typed readers for settings that come from the environment; a bad value stops start-up.

Each read in portal/settings.py is also the setting's declaration: its name, its type (the
reader), its default (or `shown`, the default as a person reads it) and, in `doc`, what it does.
README's settings table is generated from those calls (portal.settings_table), and
tests/portal/test_settings_table.py fails when a setting is read without a `doc`, read anywhere
else, or the table is stale.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingError(RuntimeError):
    """An environment variable is present but unusable."""


def env_str(
    name: str,
    default: str | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    doc: str = "",
    shown: str | None = None,
) -> str:
    del doc, shown  # the declaration, read by portal.settings_table
    value = environ.get(name)
    if value is None:
        if default is None:
            raise SettingError(f"{name} is required but not set")
        return default
    return value


def env_bool(
    name: str,
    default: bool,
    *,
    environ: Mapping[str, str] = os.environ,
    doc: str = "",
    shown: str | None = None,
) -> bool:
    del doc, shown  # the declaration, read by portal.settings_table
    raw = environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise SettingError(
        f"{name}={raw!r} is not a boolean (use one of 1/0, true/false, yes/no, on/off)"
    )


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    environ: Mapping[str, str] = os.environ,
    doc: str = "",
    shown: str | None = None,
) -> int:
    del doc, shown  # the declaration, read by portal.settings_table
    raw = environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise SettingError(f"{name}={value} is below the minimum {minimum}")
    return value


def env_float(
    name: str,
    default: float,
    *,
    environ: Mapping[str, str] = os.environ,
    doc: str = "",
    shown: str | None = None,
) -> float:
    del doc, shown  # the declaration, read by portal.settings_table
    raw = environ.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not a number") from None


def env_list(
    name: str,
    default: list[str],
    *,
    environ: Mapping[str, str] = os.environ,
    doc: str = "",
    shown: str | None = None,
) -> list[str]:
    del doc, shown  # the declaration, read by portal.settings_table
    raw = environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(
    name: str,
    default: str,
    choices: tuple[str, ...],
    *,
    environ: Mapping[str, str] = os.environ,
    doc: str = "",
    shown: str | None = None,
) -> str:
    del doc, shown  # the declaration, read by portal.settings_table
    value = env_str(name, default, environ=environ)
    if value not in choices:
        raise SettingError(f"{name}={value!r} must be one of {', '.join(choices)}")
    return value


def env_json_object(
    name: str,
    default: dict[str, str],
    *,
    environ: Mapping[str, str] = os.environ,
    doc: str = "",
    shown: str | None = None,
) -> dict[str, str]:
    """A JSON object of strings, e.g. PORTAL_ENGINE_KEYS='{"engine-a": "k1"}'."""
    del doc, shown  # the declaration, read by portal.settings_table
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return dict(default)
    try:
        value = json.loads(raw)
    except ValueError:
        raise SettingError(f"{name} is not valid JSON") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise SettingError(f"{name} must be a JSON object of strings")
    return value


OIDC_PROVIDER_KEYS = {
    "name",
    "issuer",
    "client_id",
    "client_secret_env",
    "label",
    "scopes",
    "cli_client_id",
}


def env_oidc_providers(
    name: str,
    *,
    environ: Mapping[str, str] = os.environ,
    doc: str = "",
    shown: str | None = None,
) -> list[dict[str, str]]:
    """OIDC_PROVIDERS: a JSON list of {name, issuer, client_id, client_secret_env, label?,
    scopes?, cli_client_id?}; the secret itself stays in the environment variable named by
    client_secret_env; cli_client_id is the provider's public client of `lora-portal login --sso`."""
    del doc, shown  # the declaration, read by portal.settings_table
    raw = environ.get(name, "").strip()
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        raise SettingError(f"{name} is not valid JSON") from None
    if not isinstance(value, list):
        raise SettingError(f"{name} must be a JSON list of providers")
    names: set[str] = set()
    for entry in value:
        if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
            raise SettingError(f"{name}: each provider is a JSON object of strings")
        missing = {"name", "issuer", "client_id", "client_secret_env"} - set(entry)
        unknown = set(entry) - OIDC_PROVIDER_KEYS
        if missing or unknown:
            raise SettingError(
                f"{name}: provider {entry.get('name', '?')!r} lacks {sorted(missing)} "
                f"or has unknown keys {sorted(unknown)}"
            )
        if not entry["name"].replace("-", "").isalnum() or entry["name"] in names:
            raise SettingError(f"{name}: provider names are unique letters, digits and hyphens")
        names.add(entry["name"])
    return value


def env_proxy_ssl_header(
    name: str,
    *,
    environ: Mapping[str, str] = os.environ,
    doc: str = "",
    shown: str | None = None,
) -> tuple[str, str] | None:
    """`Header-Name: value` -> Django's SECURE_PROXY_SSL_HEADER tuple; unset -> None.

    Only set it behind a proxy that overwrites the header: otherwise a client can claim HTTPS.
    """
    del doc, shown  # the declaration, read by portal.settings_table
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    header, sep, value = raw.partition(":")
    header, value = header.strip(), value.strip()
    if not sep or not header or not value:
        raise SettingError(f"{name}={raw!r} must look like 'X-Forwarded-Proto: https'")
    return "HTTP_" + header.upper().replace("-", "_"), value
