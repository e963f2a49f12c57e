"""DRF authentication with `Authorization: Bearer lp_...` tokens."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from tenants.services.tokens import token_authenticate


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        keyword, _, credentials = header.partition(" ")
        if keyword != self.keyword:
            return None
        credentials = credentials.strip()
        if not credentials or " " in credentials:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header; use 'Bearer <token>'."
            )
        token = token_authenticate(credentials)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword
