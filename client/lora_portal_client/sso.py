"""`lora-portal login --sso`: sign in at the portal's identity provider as the CLI's own public
client, then trade the ID token for a portal token (the portal's /sso/cli/token/).

The OAuth device authorization grant where the provider's discovery offers it (a code to type
in any browser, sso_device.py); else the authorization code flow with PKCE, redirected to a
loopback port of this machine (RFC 8252). `--sso-flow` forces one."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
import webbrowser
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx

from lora_portal_client.errors import ExitCode, PortalError
from lora_portal_client.sso_device import device_flow, sign_in_timed_out

WAIT_SECONDS = 300  # how long the person has to sign in at the provider
SCOPES = "openid email profile"


def sso_providers(url: str) -> list[dict[str, str]]:
    response = httpx.get(f"{url}/sso/cli/providers/", timeout=30)
    response.raise_for_status()
    return list(response.json()["providers"])


def choose_provider(providers: list[dict[str, str]], name: str | None) -> dict[str, str]:
    if name:
        for provider in providers:
            if provider["name"] == name:
                return provider
        raise PortalError(
            "sso.unknown_provider",
            f"The portal has no identity provider '{name}' for the CLI.",
            exit_code=ExitCode.USAGE,
        )
    if len(providers) != 1:
        names = ", ".join(p["name"] for p in providers) or "none"
        raise PortalError(
            "sso.choose_provider",
            f"Name the identity provider with --sso-provider NAME (offered: {names}).",
            exit_code=ExitCode.USAGE,
        )
    return providers[0]


class SsoFlow(StrEnum):
    """How `login --sso` signs in at the provider (`--sso-flow`)."""

    AUTO = "auto"  # the device grant where the provider's discovery offers it, else loopback
    DEVICE = "device"
    LOOPBACK = "loopback"


def id_token_from_provider(
    provider: dict[str, str],
    *,
    say: Any,
    open_browser: bool,
    flow: SsoFlow = SsoFlow.AUTO,
    wait_seconds: float = WAIT_SECONDS,
) -> str:
    issuer = provider["issuer"].rstrip("/")
    discovery = httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=30).json()
    offers_device = bool(discovery.get("device_authorization_endpoint"))
    if flow is SsoFlow.DEVICE and not offers_device:
        raise PortalError(
            "sso.no_device_grant",
            f"The identity provider '{provider['name']}' does not offer the device authorization "
            "grant (its discovery document has no device_authorization_endpoint); "
            "use --sso-flow loopback.",
            exit_code=ExitCode.USAGE,
        )
    if offers_device and flow is not SsoFlow.LOOPBACK:
        return device_flow(
            discovery, provider["client_id"], scopes=SCOPES, say=say, wait_seconds=wait_seconds
        )
    return _loopback_flow(
        discovery,
        provider["client_id"],
        say=say,
        open_browser=open_browser,
        wait_seconds=wait_seconds,
    )


class _Callback(BaseHTTPRequestHandler):
    """The one request the provider sends the browser back with."""

    answer: dict[str, str] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
        if urlsplit(self.path).path != "/callback" or not query:
            self.send_error(404)
            return
        type(self).answer.update(query)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.end_headers()
        self.wfile.write(b"Signed in; you may close this window and go back to lora-portal.")

    def log_message(self, *args: Any) -> None:  # quiet: the terminal is the person's
        return


def _loopback_flow(
    discovery: dict[str, Any],
    client_id: str,
    *,
    say: Any,
    open_browser: bool,
    wait_seconds: float,
) -> str:
    handler: type[_Callback] = type("Callback", (_Callback,), {"answer": {}})
    server = HTTPServer(("127.0.0.1", 0), handler)
    redirect_uri = f"http://127.0.0.1:{server.server_port}/callback"
    verifier = secrets.token_urlsafe(64)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    authorize = (
        discovery["authorization_endpoint"]
        + "?"
        + urlencode(
            {
                "response_type": "code",
                "client_id": client_id,
                "redirect_uri": redirect_uri,
                "scope": SCOPES,
                "state": state,
                "nonce": nonce,
                "code_challenge": challenge.decode(),
                "code_challenge_method": "S256",
            }
        )
    )
    say(f"Sign in at your identity provider: {authorize}")
    if open_browser:
        webbrowser.open(authorize)
    server.timeout = 1.0
    deadline = time.monotonic() + wait_seconds
    while not handler.answer and time.monotonic() < deadline:
        server.handle_request()
    server.server_close()
    answer = dict(handler.answer)
    if not answer:
        raise sign_in_timed_out(wait_seconds)
    if answer.get("state") != state:
        raise PortalError(
            "sso.bad_state",
            "The identity provider's answer is not for this sign-in (state).",
            exit_code=ExitCode.AUTH,
        )
    if "code" not in answer:
        raise PortalError(
            "sso.provider_refused",
            f"The identity provider refused: {answer.get('error')}.",
            exit_code=ExitCode.AUTH,
        )
    token = httpx.post(
        discovery["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": answer["code"],
            "redirect_uri": redirect_uri,
            "client_id": client_id,
            "code_verifier": verifier,
        },
        timeout=30,
    )
    if token.status_code != 200:
        raise PortalError(
            "sso.exchange_failed",
            f"The identity provider did not give a token: {token.text[:200]}",
            exit_code=ExitCode.AUTH,
        )
    return str(token.json()["id_token"])


def trade_for_portal_token(url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{url}/sso/cli/token/", json=body, timeout=60)
    answer = response.json()
    if response.status_code != 201:
        error = answer.get("error", {})
        raise PortalError(
            str(error.get("code", "sso.refused")),
            str(error.get("message", "The portal refused the sign-in.")),
            exit_code=ExitCode.AUTH,
            status=response.status_code,
        )
    return dict(answer)
