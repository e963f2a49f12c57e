"""The test provider's claims (groups, e-mail, name), disabled users refused a refresh (as
Keycloak, Entra ID and Okta refuse them), the tampering the bad-input tests ask for, the
switches of other providers' ways (tests/oidc_provider/switches.py), and the device grant's
polls (tests/oidc_provider/device.py)."""

from __future__ import annotations

import time

import jwt
from oauth2_provider.oauth2_validators import OAuth2Validator

from tests.oidc_provider import device, switches, tamper


class TestProviderValidator(OAuth2Validator):
    # Every claim below goes into the ID token whatever scopes were asked (groups has no scope).
    oidc_claim_scope = None

    def get_additional_claims(self, request):
        user = request.user
        return {
            "email": user.email,
            "email_verified": bool(user.email) and switches.email_verified(user.username),
            "preferred_username": user.username,
            "name": user.get_full_name() or user.username,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }

    def validate_refresh_token(self, refresh_token, client, request, *args, **kwargs):
        valid = super().validate_refresh_token(refresh_token, client, request, *args, **kwargs)
        return valid and request.user.is_active

    def _authenticate_request_body(self, request):
        # A provider that offers client_secret_basic alone refuses a secret in the form body.
        if switches.on("basic_only"):
            return False
        return super()._authenticate_request_body(request)

    def validate_grant_type(self, client_id, grant_type, client, request, *args, **kwargs):
        # A public client may also use the device grant where it is on (one client for both
        # ways of `lora-portal login --sso`, as at Keycloak).
        if grant_type == device.DEVICE_GRANT and device.enabled():
            return request.client.client_type == request.client.CLIENT_PUBLIC
        return super().validate_grant_type(client_id, grant_type, client, request, *args, **kwargs)

    def validate_device_code(self, client_id, code, request, *args, **kwargs):
        return device.poll_status(client_id, code, request)

    def finalize_id_token(self, id_token, token, token_handler, request):
        signed = super().finalize_id_token(id_token, token, token_handler, request)
        how = tamper.take() or ""
        no_kid = switches.on("no_kid")
        if not how and not no_kid:
            return signed
        header = jwt.get_unverified_header(signed)
        claims = jwt.decode(signed, options={"verify_signature": False})
        key = request.client.jwk_key.export_to_pem(private_key=True, password=None)
        if how == "expired":
            claims["iat"], claims["exp"] = int(time.time()) - 1200, int(time.time()) - 600
        elif how == "audience":
            claims["aud"] = "another-client"
        elif how == "issuer":
            claims["iss"] = "http://127.0.0.1:9/not-the-provider"
        elif how.startswith("nonce:"):
            claims["nonce"] = how.removeprefix("nonce:")
        elif how == "foreign-key":
            key = tamper.foreign_key_pem()
        headers = None if no_kid else {"kid": header["kid"]}
        return jwt.encode(claims, key, algorithm="RS256", headers=headers)
