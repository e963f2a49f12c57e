"""The engine's boundary: with PORTAL_ENGINE_KEY set, every route needs the key but liveness.

vLLM's own `--api-key` (or VLLM_API_KEY) guards only paths under /v1, /v2, /inference and
/cohere (vllm/entrypoints/serve/middleware/authenticate.py: GUARDED_PREFIX). vLLM 0.32 serves
more than that: with VLLM_ALLOW_RUNTIME_LORA_UPDATING the SageMaker routes POST /adapters and
DELETE /adapters/{name} load and unload adapters from any path (the same handlers as
/v1/load_lora_adapter), /invocations runs inference, /scale_elastic_ep reconfigures the engine,
/tokenize, /detokenize and /metrics answer anyone, and this plugin's /portal/ routes load, pin and
evict. So the plugin guards every path and lets through only the liveness probes below, whatever
routes a vLLM version adds: default deny, not a list of what to close.

The key is accepted as `Authorization: Bearer <key>` (what vLLM's own middleware reads, so one
key serves both) or as `X-Portal-Engine-Key`. A pure ASGI middleware, added when the plugin's
router is attached, so it wraps every route including those registered after it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

ENGINE_KEY_ENV = "PORTAL_ENGINE_KEY"
ENGINE_KEY_HEADER = "X-Portal-Engine-Key"
# Liveness for process managers and load balancers: they carry no data and change nothing.
OPEN_PATHS = frozenset({"/health", "/ping", "/version"})
OPEN_METHODS = frozenset({"GET", "HEAD"})

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def _digest(value: str) -> bytes:
    # Compare digests: equal length whatever was sent, so the comparison time says nothing.
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def keys_sent(headers: list[tuple[bytes, bytes]]) -> list[str]:
    """The keys a request offers: its bearer token and its X-Portal-Engine-Key header."""
    sent = []
    for name, value in headers:
        lowered = name.lower()
        text = value.decode("latin-1")
        if lowered == b"authorization":
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer":
                sent.append(token.strip())
        elif lowered == ENGINE_KEY_HEADER.lower().encode():
            sent.append(text)
    return sent


class EngineKeyGuard:
    """401 for any request without the engine key, except GET/HEAD on the liveness paths."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self._expected = _digest(key)

    def allows(self, scope: Scope) -> bool:
        root = scope.get("root_path", "")
        path = scope.get("path", "").removeprefix(root)
        if scope["type"] == "http" and path in OPEN_PATHS and scope.get("method") in OPEN_METHODS:
            return True
        match = False
        for sent in keys_sent(scope.get("headers", [])):
            match |= hmac.compare_digest(_digest(sent), self._expected)
        return match

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or self.allows(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps(
            {
                "error": {
                    "message": f"missing or wrong engine key ({ENGINE_KEY_HEADER} or bearer)",
                    "type": "Unauthorized",
                    "param": None,
                    "code": 401,
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def engine_key_from_env() -> str | None:
    return os.environ.get(ENGINE_KEY_ENV) or None
