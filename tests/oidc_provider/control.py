"""The test's hands on the provider: users and their groups, clients, tampering, switches,
logout tokens, pending device codes.

Every call carries the secret the fixture started the provider with (OIDC_PROVIDER_CONTROL_KEY).
"""

from __future__ import annotations

import hmac
import json
import os
import time
import uuid
from typing import Any

import jwt
from django.contrib.auth.models import Group, User
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from oauth2_provider.models import Application

from tests.oidc_provider import device, switches, tamper

BACKCHANNEL_EVENT = "http://schemas.openid.net/event/backchannel-logout"


def _guarded(view):
    @csrf_exempt
    def wrapped(request: HttpRequest) -> JsonResponse:
        given = request.headers.get("X-Control-Key", "")
        expected = os.environ.get("OIDC_PROVIDER_CONTROL_KEY", "")  # unset (the demo): closed
        if request.method != "POST" or not expected or not hmac.compare_digest(given, expected):
            return JsonResponse({"error": "forbidden"}, status=403)
        return JsonResponse(view(json.loads(request.body or b"{}")))

    return wrapped


@_guarded
def users(body: dict[str, Any]) -> dict[str, Any]:
    user, _ = User.objects.get_or_create(username=body["username"])
    # Only a new password is set: setting one ends the person's sessions at the provider.
    if "password" in body and not user.check_password(body["password"]):
        user.set_password(body["password"])
    user.email = body.get("email", user.email)
    user.is_active = body.get("is_active", True)
    user.save()
    if "groups" in body:
        user.groups.set([Group.objects.get_or_create(name=name)[0] for name in body["groups"]])
    switches.set_email_verified(user.username, body.get("email_verified", True))
    return {"sub": str(user.pk)}


@_guarded
def clients(body: dict[str, Any]) -> dict[str, Any]:
    public = body.get("public", False)
    app, _ = Application.objects.update_or_create(
        client_id=body["client_id"],
        defaults={
            "name": body["client_id"],
            "client_secret": body.get("client_secret", ""),
            "client_type": Application.CLIENT_PUBLIC if public else Application.CLIENT_CONFIDENTIAL,
            "authorization_grant_type": body.get("grant", Application.GRANT_AUTHORIZATION_CODE),
            "redirect_uris": " ".join(body.get("redirect_uris", [])),
            "algorithm": Application.RS256_ALGORITHM,
            "skip_authorization": True,
            "hash_client_secret": False,
        },
    )
    return {"client_id": app.client_id}


@_guarded
def tamper_next(body: dict[str, Any]) -> dict[str, Any]:
    tamper.arm(body["how"])
    return {"armed": body["how"]}


@_guarded
def switch(body: dict[str, Any]) -> dict[str, Any]:
    """Every switch of tests/oidc_provider/switches.py as the body says (left out: off); the
    answer holds them and what the portal fetched so far (`counts`)."""
    return {**switches.set_all(body), "counts": _counts()}


@_guarded
def counts(body: dict[str, Any]) -> dict[str, Any]:
    """What the portal fetched so far: its key set (`jwks`), refreshes (`refresh`)."""
    return {"counts": _counts()}


def _counts() -> dict[str, int]:
    return {what: switches.counted(what) for what in ("jwks", "refresh")}


@_guarded
def logout_token(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenID Connect back-channel logout token for the user, signed with this provider's key
    (the test delivers it, as the provider would: DOT itself sends none)."""
    app = Application.objects.get(client_id=body["client_id"])
    user = User.objects.get(username=body["username"])
    key = app.jwk_key
    claims = {
        "iss": body["issuer"],
        "aud": app.client_id,
        "iat": int(time.time()),
        "exp": int(time.time()) + 120,
        "jti": uuid.uuid4().hex,
        "sub": str(user.pk),
        "events": {BACKCHANNEL_EVENT: {}},
    }
    pem = tamper.foreign_key_pem() if body.get("forge") else key.export_to_pem(True, None)
    headers = None if switches.on("no_kid") else {"kid": key.thumbprint()}
    token = jwt.encode(claims, pem, algorithm="RS256", headers=headers)
    return {"logout_token": token}


@_guarded
def device_code(body: dict[str, Any]) -> dict[str, Any]:
    return device.control(body)
