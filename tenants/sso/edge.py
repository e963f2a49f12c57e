"""The unauthenticated single sign-on edges' refusals, before Django (an ASGI wrapper, wired in
portal/asgi.py as the gateway is): `POST /sso/cli/token/` and `/sso/<p>/backchannel-logout/`
from an address locked out by its failures, or carrying a token that does not verify, are
answered here, with the same codes and bodies as their views, the same lockout count and the same
sampled audit (tenants/sso/guard.py), but without Django's request machinery (sessions, CSRF,
messages, the SSO session check...), which costs a flood's every token several times what
refusing it does. A request that gets past (a token that verifies, a body this does not read) goes
on to the view, which checks everything again and does the work.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest

from core.errors import ApplicationError
from core.json_depth import loads_bounded
from tenants.sso.cli_views import MAX_BODY_DEPTH
from tenants.sso.guard import locked_out, record_refusal

CLI_TOKEN = "/sso/cli/token/"
BACKCHANNEL = re.compile(r"^/sso/(?P<provider>[a-zA-Z0-9_-]{1,64})/backchannel-logout/$")
# An ID or logout token is a few KiB; a larger body goes on to the view (and its body cap).
MAX_READ_BYTES = 64 * 1024


def sso_edges(app: Any) -> Any:
    """Wrap an ASGI app (Django's) with the edges' early refusals."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await app(scope, receive, send)
        path = scope.get("path", "")
        edge = "cli" if path == CLI_TOKEN else "backchannel-logout"
        if edge != "cli" and not BACKCHANNEL.match(path):
            return await app(scope, receive, send)
        body, more = await _read_body(receive)
        if not more:
            answer = await sync_to_async(_refusal)(scope, edge, path, body)
            if answer is not None:
                return await _send_json(send, *answer)
        return await app(scope, _replay(body, more, receive), send)

    return guarded


async def _read_body(receive: Any) -> tuple[bytes, bool]:
    """The body, and whether more of it is still to come (too long to read here)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False
        if size > MAX_READ_BYTES:
            return b"".join(chunks), True


def _replay(body: bytes, more: bool, receive: Any) -> Any:
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replayed


def _request(scope: dict[str, Any], path: str) -> HttpRequest:
    """What the lockout and the audit read of a request: its address, agent and path."""
    request = HttpRequest()
    request.method = "POST"
    request.path = request.path_info = path
    client = scope.get("client") or ("", 0)
    request.META["REMOTE_ADDR"] = client[0]
    for key, value in scope.get("headers", ()):
        if key in (b"x-forwarded-for", b"user-agent", b"accept"):
            name = "HTTP_" + key.decode("latin-1").upper().replace("-", "_")
            request.META[name] = value.decode("latin-1")
    return request


def _refusal(
    scope: dict[str, Any], edge: str, path: str, body: bytes
) -> tuple[int, dict[str, Any], dict[str, str]] | None:
    """(status, body, headers) of a refusal, or None: let the view answer."""
    request = _request(scope, path)
    try:
        refused = locked_out(request, edge=edge)
        if refused is not None:
            headers = {"Retry-After": str(settings.LOGIN_LOCKOUT_SECONDS)}
            return refused.status, _shaped(edge, refused), headers
        try:
            _verify(edge, path, body)
        except ApplicationError as exc:
            if not exc.code.startswith("sso."):
                return None  # the view's own answer (an unknown provider, a bad body)
            provider = BACKCHANNEL.match(path) if edge != "cli" else None
            name = provider["provider"] if provider else _cli_provider(body)
            record_refusal(request, edge=edge, provider=name[:64], code=exc.code)
            # As the views answer: the CLI's trade with the error's status, a logout with 400.
            return (exc.status if edge == "cli" else 400), _shaped(edge, exc), {}
        return None
    finally:
        close_old_connections()  # an audit row's connection, given back as a request would


def _verify(edge: str, path: str, body: bytes) -> None:
    """Raise the refusal the view would give the token; return when it verifies (or when the
    request is not one this can judge)."""
    from tenants.sso.oidc import ProviderBackend, verify_provider_jwt
    from tenants.sso.providers import provider_named

    if edge == "cli":
        try:
            data = loads_bounded(body or b"{}", MAX_BODY_DEPTH)
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        provider = provider_named(str(data.get("provider", "")))
        if not provider.cli_client_id:
            return
        token, audience = str(data.get("id_token", "")), provider.cli_client_id
    else:
        matched = BACKCHANNEL.match(path)
        assert matched is not None
        provider = provider_named(matched["provider"])
        values = parse_qs(body.decode("latin-1"), max_num_fields=20).get("logout_token", [""])
        token, audience = values[0], provider.client_id
        if not token:
            return
    verify_provider_jwt(ProviderBackend(provider), token, audience=audience)


def _cli_provider(body: bytes) -> str:
    try:
        return str(loads_bounded(body, MAX_BODY_DEPTH).get("provider", ""))
    except (ValueError, AttributeError):
        return ""


def _shaped(edge: str, error: ApplicationError) -> dict[str, Any]:
    """Each edge's own error body (cli_views.py, views.py)."""
    if edge == "cli":
        return {"error": {"code": error.code, "message": error.message}}
    return {"error": error.code, "message": error.message}


async def _send_json(send: Any, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    payload = json.dumps(body).encode()
    extra = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"cache-control", b"no-store"),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
