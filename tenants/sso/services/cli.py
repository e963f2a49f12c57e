"""`lora-portal login --sso`: the CLI signs in at the provider as its own public client and
trades the ID token it got for a portal API token, as `login` trades a password."""

from __future__ import annotations

import hashlib
from typing import Any

from django.core.cache import cache

from core.errors import NotFound
from tenants.access_port import access_for_user
from tenants.services.tokens import IssuedToken, token_issue
from tenants.sso.errors import SsoRefused
from tenants.sso.providers import provider_named
from tenants.sso.services.signin import sso_sign_in

# An ID token is traded once; remembered longer than any provider lets one live.
SEEN_SECONDS = 24 * 3600


def cli_token_exchange(
    *,
    provider: str,
    id_token: str,
    scopes: list[str],
    tenant: str | None = None,
    expires_in_days: int | None = 90,
    name: str = "",
    request_id: str = "",
) -> IssuedToken:
    from tenants.sso.oidc import ProviderBackend, verify_provider_jwt

    found = provider_named(provider)
    if not found.cli_client_id:
        raise NotFound(
            "sso.no_cli_client", f"The identity provider '{found.name}' has no CLI client set."
        )
    claims: dict[str, Any] = verify_provider_jwt(
        ProviderBackend(found), id_token, audience=found.cli_client_id
    )
    digest = hashlib.sha256(id_token.encode()).hexdigest()
    if not cache.add(f"sso-cli-id-token:{digest}", 1, SEEN_SECONDS):
        raise SsoRefused("sso.replayed", "This ID token was traded for a token before.")
    user = sso_sign_in(provider=found, claims=claims, request_id=request_id)
    access = access_for_user(user)
    return token_issue(
        access=access,
        scopes=scopes,
        tenant=access.get_tenant(tenant) if tenant else None,
        name=name or f"cli via {found.name}",
        expires_in_days=expires_in_days,
        request_id=request_id,
    )
