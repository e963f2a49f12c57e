"""Talking to engines on the request path: pooled keep-alive connections, one pool per engine,
and the reading of replies as they pass through (first token, usage) without holding them back.

aiohttp rather than httpx: its C HTTP parser and thin request path cost much less CPU per
request than httpx's layers (bench/gateway_overhead.py's profile had httpx at half of the
gateway's per-request CPU), and that CPU sits on every request's latency.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from gateway.routes import EngineInfo
from workers.vllm_client import ENGINE_KEY_HEADER


class EnginePool:
    """One aiohttp session per engine URL and key, reused by every request (keep-alive).

    Only connecting is timed here: how long a request may run is its budget
    (gateway.exchange), which aborts it at the engine without blaming the engine."""

    def __init__(self, connect_timeout: float = 2.0) -> None:
        self.timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout)
        self._sessions: dict[tuple[str, str | None], aiohttp.ClientSession] = {}
        self._fresh: dict[tuple[str, str | None], aiohttp.ClientSession] = {}

    def _new_session(self, engine: EngineInfo, **connector: Any) -> aiohttp.ClientSession:
        headers = {"content-type": "application/json"}
        if engine.key:
            headers[ENGINE_KEY_HEADER] = engine.key
            headers["authorization"] = f"Bearer {engine.key}"
        return aiohttp.ClientSession(
            base_url=engine.url,
            headers=headers,
            timeout=self.timeout,
            connector=aiohttp.TCPConnector(**connector),
            auto_decompress=False,  # the bytes pass through as the engine sent them
            skip_auto_headers=("User-Agent",),
        )

    def session(self, engine: EngineInfo) -> aiohttp.ClientSession:
        key = (engine.url, engine.key)
        session = self._sessions.get(key)
        if session is None or session.closed:
            session = self._new_session(engine, limit=256, keepalive_timeout=30)
            self._sessions[key] = session
        return session

    async def fresh_post(
        self, engine: EngineInfo, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> aiohttp.ClientResponse:
        """POST on a new connection, never a pooled one (the retry after a pooled connection
        was found dead): a session per engine whose connections close after each response."""
        key = (engine.url, engine.key)
        session = self._fresh.get(key)
        if session is None or session.closed:
            session = self._fresh[key] = self._new_session(engine, force_close=True)
        return await session.post(path, data=body, headers=headers)

    async def aclose(self) -> None:
        for session in [*self._sessions.values(), *self._fresh.values()]:
            await session.close()
        self._sessions.clear()
        self._fresh.clear()


@dataclass
class StreamWatch:
    """Reads SSE events as they pass: when the first token came, and the usage at the end."""

    started: float
    first_token_at: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""
    done: bool = False
    streamed: int = 0  # tokens passed on so far (one per choice delta that carries one)
    strip_usage: bool = False  # the caller did not ask for the usage chunk: drop it
    response_id: str = ""  # the completion's id, from its first event
    _buffer: bytes = b""
    _events: list[bytes] = field(default_factory=list)

    def feed(self, chunk: bytes) -> bytes:
        """Take raw bytes from the engine; return what to send on (whole events only)."""
        self._buffer += chunk
        out: list[bytes] = []
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            if self._keep(event):
                out.append(event + b"\n\n")
        return b"".join(out)

    def whole(self, body: bytes) -> None:
        """A whole answer (not streamed): its first token is now; its usage and id."""
        self.first_token_at = time.perf_counter()
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if not isinstance(parsed, dict):
            return
        usage = parsed.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self.completion_tokens = int(usage.get("completion_tokens") or 0)
        found = parsed.get("id")
        self.response_id = found if isinstance(found, str) else ""

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return rest

    def _keep(self, event: bytes) -> bool:
        data = event.strip()
        if not data.startswith(b"data:"):
            return True
        data = data[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return True
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            return True
        if not isinstance(parsed, dict):
            return True
        if "error" in parsed:
            error = parsed["error"]
            self.error = str(error.get("message", error)) if isinstance(error, dict) else str(error)
            return True
        if not self.response_id and isinstance(parsed.get("id"), str):
            self.response_id = parsed["id"]
        usage = parsed.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self.completion_tokens = int(usage.get("completion_tokens") or 0)
        choices = parsed.get("choices") or []
        tokens = sum(1 for c in choices if _has_token(c))
        if tokens:
            self.streamed += tokens
            if self.first_token_at is None:
                self.first_token_at = time.perf_counter()
        return not (self.strip_usage and usage and not choices)


def _has_token(choice: object) -> bool:
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")):
        return True
    return bool(choice.get("text"))


async def relay(response: aiohttp.ClientResponse, watch: StreamWatch) -> AsyncIterator[bytes]:
    """The engine's SSE stream, event by event as it arrives."""
    async for chunk in response.content.iter_any():
        out = watch.feed(chunk)
        if out:
            yield out
    tail = watch.flush()
    if tail:
        yield tail
