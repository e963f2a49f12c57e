"""The OAuth 2.0 device authorization grant (RFC 8628) for `lora-portal login --sso`: the
provider gives a code to type at its own page in any browser, on any device, while this
process polls its token endpoint at the pace the provider sets."""

from __future__ import annotations

import time
from typing import Any

import httpx

from lora_portal_client.errors import ExitCode, PortalError

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEFAULT_INTERVAL_SECONDS = 5  # when the provider names none (RFC 8628, section 3.2)
SLOW_DOWN_SECONDS = 5  # added to the interval at every slow_down, for good (section 3.5)
MAX_BACKOFF_SECONDS = 60  # the interval doubles while the provider is unreachable, up to this


def sign_in_timed_out(wait_seconds: float) -> PortalError:
    return PortalError(
        "sso.timeout",
        f"Nobody signed in at the identity provider within {wait_seconds:g} s "
        "(--sso-timeout); run `lora-portal login --sso` again.",
        exit_code=ExitCode.TIMEOUT,
    )


def device_flow(
    discovery: dict[str, Any], client_id: str, *, scopes: str, say: Any, wait_seconds: float
) -> str:
    """The provider's ID token once the person approved the code; a PortalError when they
    denied it, the code expired, or `wait_seconds` passed first."""
    started = _start(discovery["device_authorization_endpoint"], client_id, scopes)
    say(
        f"To sign in, open {started['verification_uri']} and enter the code {started['user_code']}."
    )
    if started.get("verification_uri_complete"):
        say(f"Or open {started['verification_uri_complete']} (the code filled in).")
    interval = int(started.get("interval") or DEFAULT_INTERVAL_SECONDS)
    expires_in = int(started.get("expires_in") or wait_seconds)
    deadline = time.monotonic() + min(wait_seconds, expires_in)
    while True:
        if time.monotonic() + interval > deadline:
            time.sleep(max(0.0, deadline - time.monotonic()))
            if expires_in <= wait_seconds:
                raise _code_expired()
            raise sign_in_timed_out(wait_seconds)
        time.sleep(interval)  # before every poll, the first too (section 3.4)
        try:
            answer = httpx.post(
                discovery["token_endpoint"],
                data={
                    "grant_type": DEVICE_GRANT,
                    "device_code": started["device_code"],
                    "client_id": client_id,
                },
                timeout=30,
            )
        except httpx.TransportError as exc:  # the code stays good: ask again, less often
            interval = min(interval * 2, MAX_BACKOFF_SECONDS)
            say(f"The identity provider did not answer ({exc}); asking again in {interval} s.")
            continue
        body = _json(answer)
        if answer.status_code == 200:
            if "id_token" not in body:
                raise PortalError(
                    "sso.no_id_token",
                    "The identity provider's device grant gave no ID token (ask for the openid "
                    "scope on its CLI client, or use --sso-flow loopback).",
                    exit_code=ExitCode.AUTH,
                )
            return str(body["id_token"])
        error = str(body.get("error", f"http_{answer.status_code}"))
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += SLOW_DOWN_SECONDS
            say(f"The identity provider asked to poll more slowly: every {interval} s now.")
            continue
        if error == "access_denied":
            raise PortalError(
                "sso.denied",
                "The sign-in was denied at the identity provider; nothing was created.",
                exit_code=ExitCode.AUTH,
            )
        if error == "expired_token":
            raise _code_expired()
        raise PortalError(
            "sso.provider_refused",
            f"The identity provider refused: {_described(error, body)}.",
            exit_code=ExitCode.AUTH,
        )


def _start(endpoint: str, client_id: str, scopes: str) -> dict[str, Any]:
    try:
        answer = httpx.post(endpoint, data={"client_id": client_id, "scope": scopes}, timeout=30)
    except httpx.TransportError as exc:
        raise PortalError("network.unreachable", f"{endpoint}: {exc}") from None
    body = _json(answer)
    if answer.status_code != 200 or "device_code" not in body:
        error = str(body.get("error", f"http_{answer.status_code}"))
        raise PortalError(
            "sso.provider_refused",
            f"The identity provider did not start a device sign-in: {_described(error, body)} "
            "(is the device grant allowed on its CLI client? else use --sso-flow loopback).",
            exit_code=ExitCode.AUTH,
        )
    return body


def _code_expired() -> PortalError:
    return PortalError(
        "sso.code_expired",
        "The code expired before the sign-in was approved at the identity provider; "
        "run `lora-portal login --sso` again for a new one.",
        exit_code=ExitCode.TIMEOUT,
    )


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _described(error: str, body: dict[str, Any]) -> str:
    description = body.get("error_description")
    return f"{error} ({description})" if description else error
