"""The providers' signing keys (their JWKS), kept per process: fetched on first use, kept for
JWKS_TTL_SECONDS, fetched again early only for a key id the kept set lacks (a provider rotating
its key), and then at most once every JWKS_REFRESH_SECONDS, so a stream of tokens naming keys
that do not exist costs the provider, and the portal's threads, nothing after the first.

A token without a `kid` (OpenID Connect Core 10.1 allows it when the provider has one key) is
checked with the one suitable key the set holds; with several, it is refused.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import jwt
import requests
from django.conf import settings

from tenants.sso.errors import SsoRefused

ALGORITHM = "RS256"
JWKS_TTL_SECONDS = 3600
JWKS_REFRESH_SECONDS = 60


@dataclass(frozen=True)
class _KeySet:
    keys: tuple[dict[str, Any], ...]
    fetched_at: float


_sets: dict[str, _KeySet] = {}
_lock = threading.Lock()


def signing_key(*, provider_name: str, jwks_uri: str, token: str) -> jwt.PyJWK:
    """The provider's key that `token` says it is signed with (its header's `kid`, or the one
    suitable key when it names none). Refused `sso.bad_token` when the header cannot be read,
    `sso.unknown_key` when no kept key fits even after the allowed refresh."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise SsoRefused("sso.bad_token", f"The token is not a JWT: {exc}.") from None
    if header.get("alg") != ALGORITHM:
        raise SsoRefused(
            "sso.bad_token", f"The token is signed with {header.get('alg')!r}, not {ALGORITHM}."
        )
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise SsoRefused("sso.bad_token", "The token's key id is not a string.")
    kept = _keys(jwks_uri, refresh=False)
    found = _choose(kept.keys, kid)
    if found is None and time.monotonic() - kept.fetched_at >= JWKS_REFRESH_SECONDS:
        found = _choose(_keys(jwks_uri, refresh=True).keys, kid)
    if found is None:
        named = f"key '{kid[:64]}'" if kid else "no key id, and it publishes not exactly one key"
        raise SsoRefused(
            "sso.unknown_key",
            f"The token names {named} of the identity provider '{provider_name}' "
            "that it does not publish.",
        )
    try:
        return jwt.PyJWK(found, algorithm=ALGORITHM)
    except jwt.PyJWTError as exc:
        raise SsoRefused("sso.bad_token", f"The provider's key cannot be used: {exc}.") from None


def _suitable(key: dict[str, Any]) -> bool:
    """A key that may check an RS256 signature: RSA, for signatures, of that algorithm."""
    return (
        key.get("kty") == "RSA"
        and key.get("use", "sig") == "sig"
        and key.get("alg", ALGORITHM) == ALGORITHM
    )


def _choose(keys: tuple[dict[str, Any], ...], kid: str | None) -> dict[str, Any] | None:
    suitable = [key for key in keys if _suitable(key)]
    if kid is None:
        return suitable[0] if len(suitable) == 1 else None
    named = [key for key in suitable if key.get("kid") == kid]
    return named[0] if len(named) == 1 else None


def _keys(jwks_uri: str, *, refresh: bool) -> _KeySet:
    now = time.monotonic()
    kept = _sets.get(jwks_uri)
    if kept is not None and not refresh and now - kept.fetched_at < JWKS_TTL_SECONDS:
        return kept
    with _lock:  # one fetch at a time; those who waited take what it brought
        kept = _sets.get(jwks_uri)
        if kept is not None:
            age = time.monotonic() - kept.fetched_at
            if age < (JWKS_REFRESH_SECONDS if refresh else JWKS_TTL_SECONDS):
                return kept
        fresh = _fetch(jwks_uri)
        _sets[jwks_uri] = fresh
        return fresh


def _fetch(jwks_uri: str) -> _KeySet:
    try:
        response = requests.get(jwks_uri, timeout=settings.SSO_HTTP_TIMEOUT)
        response.raise_for_status()
        keys = response.json()["keys"]
        if not isinstance(keys, list):
            raise ValueError("keys is not a list")
    except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
        raise SsoRefused(
            "sso.provider_unreachable",
            f"The identity provider's keys could not be read ({type(exc).__name__}).",
            status=502,
        ) from None
    return _KeySet(tuple(k for k in keys if isinstance(k, dict)), time.monotonic())


def forget_keys() -> None:
    """Tests start a provider per session on a new port, and switch its behaviour."""
    _sets.clear()
