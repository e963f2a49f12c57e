"""How big a request body may be, decided before a byte of it is read.

An ASGI wrapper in front of Django (portal/asgi.py): Django's ASGI handler spools a whole body to
disk before any middleware or view runs, and DRF's JSON parser then reads it all into memory, so
the cap has to come first. JSON and form bodies (every API call, the token endpoint included) may
be REQUEST_MAX_BODY_BYTES, and so may every other body, multipart included, except on the two
upload endpoints (the API's versions/ and the upload page): there a multipart body may be as large
as the largest adapter, and only when its caller is signed in (a Bearer token or a session) and may
upload to that adapter, checked before a byte is read. An anonymous multipart POST to the sign-in
endpoint, or anywhere else, gets the small cap, so nobody unknown can make the portal spool
gigabytes to disk. The gateway (/v1/) bounds its own bodies (gateway.app).
"""

from __future__ import annotations

import json
import re
from http.cookies import CookieError, SimpleCookie
from importlib import import_module
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest

TOO_LARGE = "request.too_large"
BAD_LENGTH = "request.bad_content_length"


def body_cap(content_type: str) -> int:
    """The most bytes a body of this content type may have on an upload endpoint."""
    if _is_multipart(content_type):
        return (
            settings.ADAPTER_MAX_MODEL_BYTES
            + settings.ADAPTER_MAX_CONFIG_BYTES
            + settings.REQUEST_MAX_BODY_BYTES  # the other fields and the multipart framing
        )
    return settings.REQUEST_MAX_BODY_BYTES


# The endpoints that take adapter files as multipart: (tenant slug, adapter name) from the path.
UPLOAD_PATHS = (
    re.compile(r"^/api/v1/tenants/(?P<tenant>[-\w]+)/adapters/(?P<adapter>[-\w]+)/versions/$"),
    re.compile(r"^/t/(?P<tenant>[-\w]+)/a/(?P<adapter>[-\w]+)/upload/$"),
)


def _is_multipart(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "multipart/form-data"


def _session_user(cookie_header: str | None) -> Any | None:
    from django.contrib.auth import get_user
    from django.contrib.sessions.backends.base import SessionBase

    if not cookie_header:
        return None
    try:
        morsel = SimpleCookie(cookie_header).get(settings.SESSION_COOKIE_NAME)
    except CookieError:
        return None
    if morsel is None:
        return None
    store: SessionBase = import_module(settings.SESSION_ENGINE).SessionStore(morsel.value)
    request = HttpRequest()
    request.session = store
    user = get_user(request)  # checks the session's auth hash too
    return user if user.is_authenticated else None


def may_send_upload(scope: dict[str, Any], tenant: str, adapter: str) -> bool:
    """Whether this request's caller (Bearer token, else session) may upload to the adapter."""
    from adapters.access import AccessContext
    from adapters.models import Adapter
    from tenants.services.tokens import token_authenticate

    authorization = _header(scope, b"authorization") or ""
    keyword, _, credentials = authorization.partition(" ")
    if keyword == "Bearer":
        token = token_authenticate(credentials.strip())
        access = AccessContext.for_user(token.user, token) if token is not None else None
    else:
        user = _session_user(_header(scope, b"cookie"))
        access = AccessContext.for_user(user) if user is not None else None
    if access is None:
        return False
    found = Adapter.objects.select_related("tenant").filter(tenant__slug=tenant, name=adapter)
    target = found.first()
    return target is not None and access.may_send_upload(target)


def _checked_once(scope: dict[str, Any], tenant: str, adapter: str) -> bool:
    """may_send_upload, and its database connection given back as a request would give it.

    A refused body never reaches Django, whose request_finished signal would otherwise close
    (or return to the pool) the connection the check took on this thread.
    """
    try:
        return may_send_upload(scope, tenant, adapter)
    finally:
        close_old_connections()


async def request_body_cap(scope: dict[str, Any]) -> int:
    """The most bytes this request's body may have, decided before it is read."""
    content_type = _header(scope, b"content-type") or ""
    if not _is_multipart(content_type):
        return settings.REQUEST_MAX_BODY_BYTES
    for pattern in UPLOAD_PATHS:
        matched = pattern.match(scope.get("path", ""))
        if matched is not None:
            allowed = await sync_to_async(_checked_once)(scope, **matched.groupdict())
            return body_cap(content_type) if allowed else settings.REQUEST_MAX_BODY_BYTES
    return settings.REQUEST_MAX_BODY_BYTES


class _BodyTooLarge(Exception):
    pass


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _refuse(send, status: int, code: str, message: str, **details: Any) -> None:
    body = json.dumps({"error": {"code": code, "message": message, "details": details}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _too_large_message(cap: int) -> str:
    return (
        f"The request body is larger than this endpoint accepts ({cap} bytes at most here). "
        "Send less data; adapter files go as multipart/form-data to an adapter's versions/ "
        "endpoint or upload page, signed in with the right to upload there."
    )


def limit_request_bodies(app):
    """Wrap an ASGI app so that over-long bodies are refused with 413 before they are read."""

    async def guarded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        # One thread for the caller check and Django's sync code of this request (Django's own
        # context nests in this one), as without the check: a thread more per request costs a
        # malloc arena, which an upload under a memory limit does not have to spare.
        async with ThreadSensitiveContext():
            await _guarded(scope, receive, send)

    async def _guarded(scope, receive, send):
        declared = _header(scope, b"content-length")
        if declared is not None and not declared.strip().isdigit():
            return await _refuse(
                send, 400, BAD_LENGTH, "Content-Length must be a whole number of bytes."
            )
        if declared is not None and int(declared) <= settings.REQUEST_MAX_BODY_BYTES:
            cap = settings.REQUEST_MAX_BODY_BYTES  # small enough anywhere: no caller check
        else:
            cap = await request_body_cap(scope)
        if declared is not None and int(declared) > cap:
            return await _refuse(send, 413, TOO_LARGE, _too_large_message(cap), limit_bytes=cap)
        received = 0
        started = False

        async def counted_receive():
            # A body sent without Content-Length (chunked) is counted as it arrives.
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    raise _BodyTooLarge
            return message

        async def tracked_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await app(scope, counted_receive, tracked_send)
        except _BodyTooLarge:
            if not started:
                await _refuse(send, 413, TOO_LARGE, _too_large_message(cap), limit_bytes=cap)

    return guarded
