"""How big a request body may be, decided before a byte of it is read.

An ASGI wrapper in front of Django (portal/asgi.py): Django's ASGI handler spools a whole body to
disk before any middleware or view runs, and DRF's JSON parser then reads it all into memory, so
the cap has to come first. JSON and form bodies (every API call, the token endpoint included) may
be REQUEST_MAX_BODY_BYTES; multipart bodies carry adapter uploads and may be as large as the
largest adapter (their files are streamed to disk and capped per file by the upload handlers).
The gateway (/v1/) bounds its own bodies (gateway.app).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

TOO_LARGE = "request.too_large"
BAD_LENGTH = "request.bad_content_length"


def body_cap(content_type: str) -> int:
    """The most bytes a body of this content type may have."""
    if content_type.split(";", 1)[0].strip().lower() == "multipart/form-data":
        return (
            settings.ADAPTER_MAX_MODEL_BYTES
            + settings.ADAPTER_MAX_CONFIG_BYTES
            + settings.REQUEST_MAX_BODY_BYTES  # the other fields and the multipart framing
        )
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
        f"The request body is larger than this endpoint accepts ({cap} bytes at most for this "
        "content type). Send less data, or upload adapter files as multipart/form-data."
    )


def limit_request_bodies(app):
    """Wrap an ASGI app so that over-long bodies are refused with 413 before they are read."""

    async def guarded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        cap = body_cap(_header(scope, b"content-type") or "")
        declared = _header(scope, b"content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                return await _refuse(
                    send, 400, BAD_LENGTH, "Content-Length must be a whole number of bytes."
                )
            if int(declared) > cap:
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
