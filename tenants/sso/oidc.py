"""The OpenID Connect code flow with PKCE, by mozilla-django-oidc, one configuration per provider.

mozilla-django-oidc reads one provider from settings; here each view and backend answers its
settings from the chosen Provider instead. It keeps the state, nonce and PKCE verifier in the
session and exchanges the code; the ID token's checks it leaves out (issuer, audience, expiry,
issued-at) are added in verify_token (docs/decisions/0009-sso-library.md).
"""

from __future__ import annotations

import time
from typing import Any

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from tenants.sso.errors import SsoRefused
from tenants.sso.jwks import signing_key
from tenants.sso.providers import Provider
from tenants.sso.services.alerts import alert_provider_misconfigured
from tenants.sso.services.signin import sso_sign_in
from tenants.sso.token_endpoint import ProviderMisconfigured, token_request

CALLBACK_URL_NAME = "sso-callback"
# Clocks of portal and provider may differ by this much.
LEEWAY_SECONDS = 30
SESSION_PROVIDER = "sso_provider"
SESSION_RECHECK_AT = "sso_recheck_at"
SESSION_SUBJECT = "sso_subject"
SESSION_SIGNED_IN_AT = "sso_signed_in_at"


def provider_settings(provider: Provider, attr: str, *args: Any) -> Any:
    """mozilla-django-oidc's settings, answered for one provider."""
    per_provider = {
        "OIDC_OP_AUTHORIZATION_ENDPOINT": lambda: provider.endpoint("authorization_endpoint"),
        "OIDC_RP_CLIENT_ID": lambda: provider.client_id,
        "OIDC_RP_SCOPES": lambda: provider.scopes,
        "OIDC_USE_PKCE": lambda: True,
        "OIDC_USE_NONCE": lambda: True,
        "OIDC_AUTHENTICATION_CALLBACK_URL": lambda: CALLBACK_URL_NAME,
        "OIDC_TIMEOUT": lambda: settings.SSO_HTTP_TIMEOUT,
        "LOGIN_REDIRECT_URL": lambda: settings.LOGIN_REDIRECT_URL,
    }
    if attr in per_provider:
        return per_provider[attr]()
    return import_from_settings(attr, *args)


class DryRunClaims(Exception):  # noqa: N818 (not an error: the dry run's way out)
    """A platform admin's dry run as a test user: the verified claims, for the SSO page."""

    def __init__(self, claims: dict[str, Any]) -> None:
        super().__init__("dry run")
        self.claims = claims


class ProviderBackend(OIDCAuthenticationBackend):
    """One sign-in through one provider (built per request by backends.SsoBackend)."""

    def __init__(self, provider: Provider) -> None:  # noqa: D107 (no settings read here)
        self.provider = provider
        self.OIDC_OP_TOKEN_ENDPOINT = provider.endpoint("token_endpoint")
        self.OIDC_OP_USER_ENDPOINT = provider.discovery().get("userinfo_endpoint", "")
        self.OIDC_OP_JWKS_ENDPOINT = provider.endpoint("jwks_uri")
        self.OIDC_RP_CLIENT_ID = provider.client_id
        self.OIDC_RP_CLIENT_SECRET = provider.client_secret
        self.OIDC_RP_SIGN_ALGO = "RS256"
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.UserModel = get_user_model()
        self.token_info: dict[str, Any] = {}

    def get_settings(self, attr: str, *args: Any) -> Any:
        return provider_settings(self.provider, attr, *args)

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The code exchange, with the client authentication the provider's discovery offers
        (token_endpoint.py); a refusal of the portal's client alerts the platform admins."""
        form = {k: str(v) for k, v in payload.items() if k not in ("client_id", "client_secret")}
        try:
            answer = token_request(self.provider, form)
        except ProviderMisconfigured as exc:
            alert_provider_misconfigured(
                provider=self.provider.name,
                detail=exc.message,
                request_id=getattr(self.request, "request_id", ""),
            )
            raise SsoRefused(exc.code, exc.message, status=502) from None
        if answer.refused:
            raise SsoRefused(
                "sso.exchange_failed",
                "The identity provider did not accept this sign-in's code (it may have been "
                "used before). Start again from the sign-in page.",
            )
        self.token_info = answer.tokens
        return self.token_info

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        claims = verify_provider_jwt(self, token, audience=self.provider.client_id)
        if claims.get("nonce") != kwargs.get("nonce"):
            raise SsoRefused(
                "sso.nonce_mismatch",
                "The identity provider's answer belongs to another sign-in (its nonce does not "
                "match this one's): it may have been replayed. Start again.",
            )
        return claims

    def store_tokens(self, access_token: str, id_token: str) -> None:
        """Nothing yet: the library calls this before the sign-in is decided. The session's
        keys are written once the person is signed in (get_or_create_user): a refused sign-in
        or a dry run (the test user's tokens, in the admin's session) leaving them there would
        make the session's next request re-check someone else and end it."""

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        """The ID token's claims decide (groups included); no e-mail lookup, no userinfo call."""
        if getattr(self.request, "sso_dry_run", False):
            raise DryRunClaims(payload)
        user = sso_sign_in(
            provider=self.provider,
            claims=payload,
            refresh_token=self.token_info.get("refresh_token", ""),
            request_id=getattr(self.request, "request_id", ""),
        )
        self._keep_in_session(payload)
        return user

    def _keep_in_session(self, claims: dict[str, Any]) -> None:
        """For the re-check at ID token expiry (session.SsoSessionRecheck). The refresh token is
        not kept here: the identity holds it, sealed (services.signin)."""
        session = self.request.session
        session[SESSION_PROVIDER] = self.provider.name
        session[SESSION_SUBJECT] = str(claims["sub"])
        session[SESSION_RECHECK_AT] = recheck_at(claims)
        session[SESSION_SIGNED_IN_AT] = time.time()


def recheck_at(claims: dict[str, Any]) -> float:
    """When the session must ask the provider again: the ID token's expiry, or sooner."""
    return min(float(claims["exp"]), time.time() + settings.SSO_RECHECK_SECONDS)


def verify_provider_jwt(backend: ProviderBackend, token: str, *, audience: str) -> dict[str, Any]:
    """A JWT from `backend.provider` (ID token or logout token): signed by a key it publishes,
    issued by it, for us, not expired. Each failure is refused with its own code."""
    provider = backend.provider
    key = signing_key(
        provider_name=provider.name, jwks_uri=backend.OIDC_OP_JWKS_ENDPOINT, token=token
    )
    try:
        return jwt.decode(
            token,
            key,
            algorithms=["RS256"],
            audience=audience,
            issuer=provider.issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": ["iss", "aud", "exp", "iat", "sub"]},
        )
    except jwt.InvalidSignatureError:
        raise SsoRefused(
            "sso.bad_signature",
            f"The token is not signed by a key of the identity provider '{provider.name}'.",
        ) from None
    except jwt.ExpiredSignatureError:
        raise SsoRefused(
            "sso.token_expired", "The identity provider's token has expired."
        ) from None
    except jwt.InvalidAudienceError:
        raise SsoRefused(
            "sso.wrong_audience", "The identity provider's token was issued for another client."
        ) from None
    except jwt.InvalidIssuerError:
        raise SsoRefused(
            "sso.unknown_issuer",
            f"The token was issued by an unknown issuer, not by '{provider.name}'.",
        ) from None
    except (jwt.PyJWTError, KeyError) as exc:
        raise SsoRefused(
            "sso.bad_token", f"The identity provider's token is not valid: {exc}."
        ) from None
