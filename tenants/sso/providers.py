"""The configured OpenID Connect providers (settings.OIDC_PROVIDERS) and their discovery
documents, fetched once per process and kept for an hour."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings

from core.errors import ApplicationError, NotFound

DISCOVERY_TTL_SECONDS = 3600
_discovered: dict[str, tuple[float, dict[str, Any]]] = {}


@dataclass(frozen=True)
class Provider:
    name: str
    issuer: str
    client_id: str
    client_secret_env: str
    label: str
    scopes: str
    # The provider's public client for `lora-portal login --sso` (none: the CLI cannot use it).
    cli_client_id: str = ""

    @property
    def client_secret(self) -> str:
        return os.environ.get(self.client_secret_env, "")

    def discovery(self) -> dict[str, Any]:
        """The provider's /.well-known/openid-configuration, whose issuer must be the one set."""
        cached = _discovered.get(self.name)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            response = requests.get(url, timeout=settings.SSO_HTTP_TIMEOUT)
            response.raise_for_status()
            document = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise ApplicationError(
                "sso.provider_unreachable",
                f"The identity provider '{self.name}' did not answer its discovery document.",
                status=502,
            ) from exc
        if document.get("issuer") != self.issuer:
            raise ApplicationError(
                "sso.provider_misconfigured",
                f"The identity provider '{self.name}' names another issuer than the one set.",
                status=502,
            )
        _discovered[self.name] = (time.monotonic() + DISCOVERY_TTL_SECONDS, document)
        return document

    def endpoint(self, name: str) -> str:
        return str(self.discovery()[name])


def configured_providers() -> list[Provider]:
    return [
        Provider(
            name=entry["name"],
            issuer=entry["issuer"],
            client_id=entry["client_id"],
            client_secret_env=entry["client_secret_env"],
            label=entry.get("label") or entry["name"],
            scopes=entry.get("scopes") or "openid email profile",
            cli_client_id=entry.get("cli_client_id", ""),
        )
        for entry in settings.OIDC_PROVIDERS
    ]


def provider_named(name: str) -> Provider:
    for provider in configured_providers():
        if provider.name == name:
            return provider
    raise NotFound("sso.unknown_provider", f"No identity provider named '{name}'.")


def forget_discovery() -> None:
    """Tests start a provider per session on a new port: what an earlier one said is stale."""
    _discovered.clear()
