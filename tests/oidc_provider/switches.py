"""Behaviours of other standard providers, switched on at run time by the control endpoint, and
counts of what the portal asked for; kept in files beside the database so every worker thread of
the provider sees them.

- `no_kid`: ID tokens (and logout tokens) carry no `kid` in their header (OpenID Connect Core
  10.1 allows it for a provider with one key).
- `basic_only`: the discovery document offers `client_secret_basic` alone, and a client secret
  sent in the form body is refused `invalid_client` (as such providers do).
- `refresh_without_id_token`: a refresh answers an access and a refresh token, no ID token
  (OpenID Connect Core 12.2 allows it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from oauth2_provider.views import ConnectDiscoveryInfoView, JwksInfoView, TokenView

from tests.oidc_provider import device

NAMES = ("no_kid", "basic_only", "refresh_without_id_token")


def _dir() -> Path:
    return Path(settings.DATABASES["default"]["NAME"]).parent


def set_all(body: dict[str, Any]) -> dict[str, bool]:
    """Every switch as `body` says (one left out is off)."""
    unknown = set(body) - set(NAMES)
    if unknown:
        raise ValueError(f"unknown switches: {sorted(unknown)}")
    state = {name: bool(body.get(name, False)) for name in NAMES}
    (_dir() / "switches.json").write_text(json.dumps(state))
    return state


def on(name: str) -> bool:
    try:
        return bool(json.loads((_dir() / "switches.json").read_text()).get(name))
    except FileNotFoundError:
        return False


def set_email_verified(username: str, verified: bool) -> None:
    """Whether the provider vouches for this person's e-mail address (default: it does)."""
    path = _dir() / "unverified-emails.json"
    try:
        unverified = set(json.loads(path.read_text()))
    except FileNotFoundError:
        unverified = set()
    unverified = unverified - {username} if verified else unverified | {username}
    path.write_text(json.dumps(sorted(unverified)))


def email_verified(username: str) -> bool:
    try:
        return username not in json.loads((_dir() / "unverified-emails.json").read_text())
    except FileNotFoundError:
        return True


def count(what: str) -> None:
    path = _dir() / f"count-{what}"
    # One thread per request, few requests at a time in a test: a lost count fails the test
    # that reads it, never hides a fetch (each write is whole).
    path.write_text(str(counted(what) + 1))


def counted(what: str) -> int:
    try:
        return int((_dir() / f"count-{what}").read_text() or 0)
    except FileNotFoundError:
        return 0


class DiscoveryView(ConnectDiscoveryInfoView):
    """The library's discovery document, with the device grant where it is on and only the
    basic client authentication where `basic_only` is."""

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().get(request, *args, **kwargs)
        data = json.loads(response.content)
        if device.enabled():
            data["device_authorization_endpoint"] = request.build_absolute_uri(
                "/o/device-authorization/"
            )
            data["grant_types_supported"] = [
                "authorization_code",
                "refresh_token",
                device.DEVICE_GRANT,
            ]
        if on("basic_only"):
            data["token_endpoint_auth_methods_supported"] = ["client_secret_basic"]
        answer = JsonResponse(data)
        answer["Access-Control-Allow-Origin"] = "*"
        return answer


class CountedJwksView(JwksInfoView):
    """The library's key set, each fetch counted (what a cache in the portal saves)."""

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        count("jwks")
        return super().get(request, *args, **kwargs)


class SwitchedTokenView(device.DeviceTokenView):
    """The token endpoint: the device grant's polls where it is on, the library's otherwise;
    a refresh's ID token left out where `refresh_without_id_token` is on."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        grant = request.POST.get("grant_type")
        if grant == device.DEVICE_GRANT and device.enabled():
            response = super().post(request, *args, **kwargs)
        else:
            response = TokenView.post(self, request, *args, **kwargs)
        if grant == "refresh_token":
            count("refresh")
            if response.status_code == 200 and on("refresh_without_id_token"):
                data = json.loads(response.content)
                data.pop("id_token", None)
                response.content = json.dumps(data).encode()
                response["Content-Length"] = str(len(response.content))
        return response
