"""The OAuth 2.0 device authorization grant (RFC 8628) at the test provider, with an ID token, as
Keycloak, Entra ID and Okta offer it; on only when started with `--device-grant`.

django-oauth-toolkit has the grant's endpoints and pages but leaves three things out, added here:
its discovery document does not advertise the grant (tests/oidc_provider/switches.py adds it),
oauthlib's device grant is plain OAuth (no ID token), and its token endpoint never answers
`slow_down` nor notices that a code expired.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from oauth2_provider.models import get_device_grant_model
from oauth2_provider.views import DeviceAuthorizationView, TokenView
from oauthlib.oauth2.rfc8628.grant_types import DeviceCodeGrant
from oauthlib.openid import Server

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# The clock of one poll is taken before its answer is sent, the next one's after the client waited.
POLL_CLOCK_SLACK_SECONDS = 0.1


def enabled() -> bool:
    return os.environ.get("OIDC_PROVIDER_DEVICE_GRANT") == "1"


def poll_status(client_id: str, device_code: str, request: Any) -> str | None:
    """What a poll of the token endpoint gets (the validator's answer, RFC 8628 section 3.5).
    A poll sooner than the code's interval after the last one is told to slow down."""
    grant = (
        get_device_grant_model()
        .objects.filter(device_code=device_code, client_id=client_id)
        .first()
    )
    if grant is None:
        return None
    if grant.is_expired():
        return DeviceCodeGrant.DEVICE_CODE_EXPIRED
    if grant.status == grant.DENIED:
        return DeviceCodeGrant.DEVICE_CODE_DENIED
    since_last = (timezone.now() - grant.last_checked).total_seconds()
    grant.save(update_fields=["last_checked"])  # every poll starts the next interval
    # Approved or not, a poll too soon gets no token: a client that ignores the pace never does.
    if since_last + POLL_CLOCK_SLACK_SECONDS < grant.interval:
        return DeviceCodeGrant.DEVICE_CODE_SLOW_DOWN
    if grant.status == grant.AUTHORIZED:
        request.user = grant.user
        request.scopes = grant.scope.split()
        return DeviceCodeGrant.DEVICE_CODE_AUTHORIZED
    return DeviceCodeGrant.DEVICE_CODE_PENDING


class OpenIDDeviceCodeGrant(DeviceCodeGrant):
    """The device grant with an ID token when `openid` was asked for (OpenID Connect has no
    device grant of its own; providers add the ID token as the code flow does)."""

    def create_token_response(self, request, token_handler):
        headers, body, status = super().create_token_response(request, token_handler)
        if status != 200 or "openid" not in (request.scopes or []):
            return headers, body, status
        token = json.loads(body)
        claims = {
            "aud": request.client_id,
            "iat": int(time.time()),
            "at_hash": _left_half_sha256(token["access_token"]),
        }
        token["id_token"] = self.request_validator.finalize_id_token(
            claims, token, token_handler, request
        )
        return headers, json.dumps(token), status


def _left_half_sha256(value: str) -> str:
    """`at_hash` (OpenID Connect Core 3.1.3.6) for RS256."""
    digest = hashlib.sha256(value.encode()).digest()
    return base64.urlsafe_b64encode(digest[: len(digest) // 2]).decode().rstrip("=")


class DeviceGrantServer(Server):
    def __init__(self, request_validator, *args, **kwargs):
        super().__init__(request_validator, *args, **kwargs)
        self.device_code_grant = OpenIDDeviceCodeGrant(request_validator, **kwargs)
        self._grant_types[DEVICE_GRANT] = self.device_code_grant


class DeviceStartView(DeviceAuthorizationView):
    """The device authorization endpoint (RFC 8628 section 3.1). The library's own view breaks on
    the `scope` oauthlib now answers with, and stores a fixed interval; this one keeps the
    scopes granted and the interval it announced on the code."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        headers, started, status = self.create_device_authorization_response(request)
        if status != 200:
            return JsonResponse(json.loads(started), status=status, headers=headers)
        get_device_grant_model().objects.create(
            client_id=request.POST["client_id"],
            device_code=started["device_code"],
            user_code=started["user_code"],
            scope=started.get("scope", ""),
            interval=int(started.get("interval", 5)),
            expires=timezone.now() + timedelta(seconds=int(started["expires_in"])),
        )
        return JsonResponse(started, headers=headers)


class DeviceTokenView(TokenView):
    """A device code's polls go to the validator (poll_status), and a code gives one token."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.POST.get("grant_type") != DEVICE_GRANT:
            return super().post(request, *args, **kwargs)
        model = get_device_grant_model()
        grant = model.objects.filter(device_code=request.POST.get("device_code", "")).first()
        if grant is None:
            return JsonResponse({"error": "invalid_grant"}, status=400)
        response = self.authorization_flow_token_response(request)
        if response.status_code == 200:
            model.objects.filter(pk=grant.pk).update(status=model.EXPIRED)
        return response


def control(body: dict[str, Any]) -> dict[str, Any]:
    """The test's hands on a pending code: raise its interval (as a provider under load does,
    to be answered with slow_down), or make it expire now."""
    model = get_device_grant_model()
    codes = model.objects.filter(user_code=body["user_code"])
    if "interval" in body:
        codes.update(interval=int(body["interval"]))
    if body.get("expire"):
        codes.update(expires=timezone.now() - timedelta(seconds=1))
    grant = codes.get()
    return {"status": grant.status, "interval": grant.interval}
