"""Authentication backends: the local-password gate, and the sessions of SSO sign-ins."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied


def local_password_allowed(username: str | None) -> bool:
    """SSO_LOCAL_PASSWORDS off: only the break-glass admin may still use a password."""
    if settings.SSO_LOCAL_PASSWORDS:
        return True
    return bool(settings.SSO_BREAK_GLASS_ADMIN) and username == settings.SSO_BREAK_GLASS_ADMIN


class LocalPasswordGate:
    """Placed before ModelBackend: PermissionDenied stops Django's authenticate() there, so the
    password is never checked for anyone but the break-glass admin when passwords are off. No
    get_user: it is never a session's backend (the test client's force_login takes the first
    backend that has one)."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> None:
        if username is not None and password is not None and not local_password_allowed(username):
            raise PermissionDenied("local passwords are turned off")
        return None


class SsoBackend(ModelBackend):
    """Signs in through the provider the callback view chose (request.sso_provider); afterwards
    it is the backend of the session, so ModelBackend's get_user (active users only) serves."""

    def authenticate(  # type: ignore[override]
        self,
        request: Any,
        nonce: str | None = None,
        code_verifier: str | None = None,
        **kwargs: Any,
    ) -> Any:
        provider = getattr(request, "sso_provider", None)
        if provider is None or nonce is None:
            return None
        from tenants.sso.oidc import ProviderBackend

        return ProviderBackend(provider).authenticate(
            request, nonce=nonce, code_verifier=code_verifier
        )
