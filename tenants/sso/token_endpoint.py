"""Calls to a provider's token endpoint (the code exchange, the re-check's refresh), with the
client authentication its discovery document offers, and what a refusal means.

`token_endpoint_auth_methods_supported` names the methods; absent, it is `client_secret_basic`
(OpenID Connect Discovery 1.0, section 3). A provider that offers only that one refuses a secret in
the form body with `invalid_client`: sent the wrong way, every refresh would read as every
person refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

import requests
from django.conf import settings

from core.errors import ApplicationError
from tenants.sso.providers import Provider

BASIC, POST = "client_secret_basic", "client_secret_post"
# Refusals that are the person's (their grant expired, was revoked, or they were disabled):
# RFC 6749 section 5.2. Every other refusal says the portal asked wrongly (its client, its
# secret, its scopes): nobody loses anything over it.
PERSONS_REFUSALS = {"invalid_grant"}


class ProviderMisconfigured(ApplicationError):
    """The provider refused the portal's client, not the person: the portal's settings (or the
    client's registration at the provider) are wrong."""

    status = 502

    def __init__(self, provider: Provider, error: str) -> None:
        super().__init__(
            "sso.provider_misconfigured",
            f"The identity provider '{provider.name}' refused the portal's client ({error}); "
            "check the client id, its secret and its registration at the provider.",
            status=502,
        )
        self.error = error


@dataclass(frozen=True)
class TokenAnswer:
    """200: `tokens`; the person refused: `refused`."""

    tokens: dict[str, Any]
    refused: bool = False


def auth_method(provider: Provider) -> str:
    offered = provider.discovery().get("token_endpoint_auth_methods_supported") or [BASIC]
    if BASIC in offered:
        return BASIC
    if POST in offered:
        return POST
    raise ProviderMisconfigured(provider, f"it offers no client secret method: {offered}")


def token_request(provider: Provider, form: dict[str, str]) -> TokenAnswer:
    """POST `form` to the token endpoint as the portal's client. RequestException when the
    provider does not answer (or answers 5xx); ProviderMisconfigured for a refusal of the
    portal's own making; `refused` for the person's."""
    data = {**form, "client_id": provider.client_id}
    auth = None
    if auth_method(provider) == BASIC:
        # RFC 6749 2.3.1: each part form-encoded before it is joined and base64-encoded.
        auth = (quote_plus(provider.client_id), quote_plus(provider.client_secret))
    else:
        data["client_secret"] = provider.client_secret
    response = requests.post(
        provider.endpoint("token_endpoint"),
        data=data,
        auth=auth,
        timeout=settings.SSO_HTTP_TIMEOUT,
    )
    if response.status_code == 200:
        try:
            return TokenAnswer(tokens=dict(response.json()))
        except ValueError:
            raise ProviderMisconfigured(provider, "its answer is not JSON") from None
    if response.status_code >= 500:
        response.raise_for_status()
    try:
        error = str(response.json().get("error", ""))[:100]
    except (ValueError, AttributeError):
        error = ""
    if error in PERSONS_REFUSALS:
        return TokenAnswer(tokens={}, refused=True)
    raise ProviderMisconfigured(provider, error or f"HTTP {response.status_code}")
