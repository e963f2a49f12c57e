"""The re-check of a signed-in SSO session: at ID token expiry the provider is asked again
(a refresh), and the answer's claims are synced; a refusal ends the session and withdraws what
the mapping gave (the portal cannot tell a disabled account from a lapsed grant: it fails closed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests
from django.conf import settings

from core.errors import ApplicationError
from tenants.sso.errors import SsoRefused
from tenants.sso.models import SsoIdentity
from tenants.sso.providers import Provider, provider_named
from tenants.sso.resolution import resolve_claims
from tenants.sso.sealing import seal
from tenants.sso.services.sync import apply_sync, withdraw_managed_access


@dataclass(frozen=True)
class Recheck:
    """The outcome: None for a session that goes on, else the code of why it ended."""

    ended: str | None
    refresh_token: str = ""
    recheck_at: float = 0.0


def recheck_session(
    *, identity: SsoIdentity, provider_name: str, refresh_token: str, request_id: str = ""
) -> Recheck:
    from tenants.sso.oidc import ProviderBackend, recheck_at, verify_provider_jwt

    try:
        provider = provider_named(provider_name)
        backend = ProviderBackend(provider)
        answer = _refresh(provider, backend, refresh_token)
    except requests.RequestException:
        return Recheck(ended="sso.provider_unreachable")
    except ApplicationError as exc:  # refused, or the provider is gone from the settings
        return Recheck(ended=exc.code)
    if answer is None:
        withdraw_managed_access(
            identity=identity, reason="the provider refused the refresh", request_id=request_id
        )
        return Recheck(ended="sso.provider_refused")
    try:
        claims = verify_provider_jwt(backend, answer["id_token"], audience=provider.client_id)
    except (SsoRefused, KeyError):
        return Recheck(ended="sso.bad_token")
    if str(claims["sub"]) != identity.subject:
        return Recheck(ended="sso.bad_token")
    resolution = resolve_claims(provider.name, claims)
    apply_sync(identity=identity, resolution=resolution, request_id=request_id)
    if resolution.is_empty:
        return Recheck(ended="sso.maps_nowhere")
    kept = answer.get("refresh_token") or refresh_token
    # The identity holds the one live grant (a provider that rotates revokes the old token):
    # the session re-check and the scheduled one (token_recheck.py) both read and rotate it here.
    identity.refresh_token_sealed = seal(kept)
    identity.id_token_expires_at = datetime.fromtimestamp(float(claims["exp"]), tz=UTC)
    identity.save(update_fields=["refresh_token_sealed", "id_token_expires_at"])
    return Recheck(ended=None, refresh_token=kept, recheck_at=recheck_at(claims))


def _refresh(provider: Provider, backend: Any, refresh_token: str) -> dict[str, Any] | None:
    """The token endpoint's answer to a refresh, or None when the provider refuses it."""
    if not refresh_token:
        return None
    response = requests.post(
        backend.OIDC_OP_TOKEN_ENDPOINT,
        data={
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": provider.client_id,
            "client_secret": provider.client_secret,
            "scope": provider.scopes,
        },
        timeout=settings.SSO_HTTP_TIMEOUT,
    )
    if response.status_code in (400, 401):
        return None
    response.raise_for_status()
    return dict(response.json())
