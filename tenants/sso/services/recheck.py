"""The re-check of a signed-in SSO session: at ID token expiry the provider is asked again
(a refresh), and the answer's claims are synced; the person's refusal (`invalid_grant`) ends the
session and withdraws what the mapping gave (the portal cannot tell a disabled account from a
lapsed grant: it fails closed). A refusal of the portal's own client withdraws nothing."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests
from django.conf import settings

from core.errors import ApplicationError
from tenants.sso.errors import SsoRefused
from tenants.sso.models import SsoIdentity
from tenants.sso.providers import provider_named
from tenants.sso.resolution import resolve_claims, verified_email
from tenants.sso.sealing import seal
from tenants.sso.services.alerts import alert_provider_misconfigured
from tenants.sso.services.sync import apply_sync, withdraw_managed_access
from tenants.sso.token_endpoint import ProviderMisconfigured, token_request


@dataclass(frozen=True)
class Recheck:
    """The outcome: None for a session that goes on, else the code of why it ended."""

    ended: str | None
    refresh_token: str = ""
    recheck_at: float = 0.0


def recheck_session(
    *, identity: SsoIdentity, provider_name: str, refresh_token: str, request_id: str = ""
) -> Recheck:
    """Refresh with the identity's grant and sync the claims of the answer: its ID token's, or
    the userinfo endpoint's where the answer has none (OpenID Connect Core 12.2 allows that).
    Only the person's refusal (`invalid_grant`) withdraws anything; a refusal of the portal's
    own client (`sso.provider_misconfigured`) alerts the platform admins and changes nothing."""
    from tenants.sso.oidc import ProviderBackend, recheck_at, verify_provider_jwt

    if not refresh_token:
        withdraw_managed_access(
            identity=identity, reason="no refresh token to ask with", request_id=request_id
        )
        return Recheck(ended="sso.provider_refused")
    try:
        provider = provider_named(provider_name)
        backend = ProviderBackend(provider)
        answer = token_request(
            provider,
            {
                "grant_type": "refresh_token",
                "refresh_token": refresh_token,
                "scope": provider.scopes,
            },
        )
    except requests.RequestException:
        return Recheck(ended="sso.provider_unreachable")
    except ProviderMisconfigured as exc:
        alert_provider_misconfigured(
            provider=provider_name, detail=exc.message, request_id=request_id
        )
        return Recheck(ended=exc.code)
    except ApplicationError as exc:  # the provider is gone from the settings, or unreachable
        return Recheck(ended=exc.code)
    if answer.refused:
        withdraw_managed_access(
            identity=identity, reason="the provider refused the refresh", request_id=request_id
        )
        return Recheck(ended="sso.provider_refused")
    tokens = answer.tokens
    try:
        if tokens.get("id_token"):
            claims = verify_provider_jwt(backend, tokens["id_token"], audience=provider.client_id)
            expires_at = float(claims["exp"])
        else:
            claims = _userinfo(backend, str(tokens.get("access_token") or ""))
            expires_at = time.time() + settings.SSO_RECHECK_SECONDS
    except SsoRefused as exc:  # an answer that does not verify says nothing about the person
        unreachable = exc.code == "sso.provider_unreachable"
        return Recheck(ended=exc.code if unreachable else "sso.bad_token")
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return Recheck(ended="sso.bad_token")
    if str(claims.get("sub")) != identity.subject:
        return Recheck(ended="sso.bad_token")
    resolution = resolve_claims(provider.name, claims)
    apply_sync(identity=identity, resolution=resolution, request_id=request_id)
    if resolution.is_empty:
        return Recheck(ended="sso.maps_nowhere")
    kept = tokens.get("refresh_token") or refresh_token
    # The identity holds the one live grant (a provider that rotates revokes the old token):
    # the session re-check and the scheduled one (token_recheck.py) both read and rotate it here.
    identity.refresh_token_sealed = seal(kept)
    identity.verified_email = verified_email(claims)
    identity.id_token_expires_at = datetime.fromtimestamp(expires_at, tz=UTC)
    identity.save(update_fields=["refresh_token_sealed", "verified_email", "id_token_expires_at"])
    return Recheck(
        ended=None, refresh_token=kept, recheck_at=recheck_at({**claims, "exp": expires_at})
    )


def _userinfo(backend: Any, access_token: str) -> dict[str, Any]:
    """The person's claims from the provider's userinfo endpoint (a refresh without an ID
    token): asked with the access token just issued, over the provider's own TLS."""
    if not access_token or not backend.OIDC_OP_USER_ENDPOINT:
        raise SsoRefused(
            "sso.bad_token", "The refresh carried no ID token and the provider has no userinfo."
        )
    claims = backend.get_userinfo(access_token, None, None)
    if not isinstance(claims, dict):
        raise ValueError("userinfo is not an object")
    return claims
