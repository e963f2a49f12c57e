"""Talking to engines on the request path: pooled keep-alive connections, one per engine, and
the reading of replies as they pass through (first token, usage) without holding them back."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import orjson

from gateway.routes import EngineInfo
from workers.vllm_client import ENGINE_KEY_HEADER


class EnginePool:
    """One httpx client per engine URL, reused by every request (keep-alive)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._clients: dict[str, httpx.AsyncClient] = {}

    def client(self, engine: EngineInfo) -> httpx.AsyncClient:
        client = self._clients.get(engine.url)
        if client is None:
            headers = {"content-type": "application/json"}
            if engine.key:
                headers[ENGINE_KEY_HEADER] = engine.key
                headers["authorization"] = f"Bearer {engine.key}"
            client = httpx.AsyncClient(
                base_url=engine.url,
                headers=headers,
                timeout=httpx.Timeout(self.timeout, connect=2.0),
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            )
            self._clients[engine.url] = client
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


@dataclass
class StreamWatch:
    """Reads SSE events as they pass: when the first token came, and the usage at the end."""

    started: float
    first_token_at: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""
    done: bool = False
    strip_usage: bool = False  # the caller did not ask for the usage chunk: drop it
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
        usage = parsed.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self.completion_tokens = int(usage.get("completion_tokens") or 0)
        choices = parsed.get("choices") or []
        if self.first_token_at is None and any(_has_token(c) for c in choices):
            self.first_token_at = time.perf_counter()
        return not (self.strip_usage and usage and not choices)


def _has_token(choice: object) -> bool:
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")):
        return True
    return bool(choice.get("text"))


def usage_of(body: bytes) -> tuple[int, int]:
    try:
        usage = orjson.loads(body).get("usage") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return 0, 0
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


async def relay(response: httpx.Response, watch: StreamWatch) -> AsyncIterator[bytes]:
    """The engine's SSE stream, event by event as it arrives."""
    async for chunk in response.aiter_raw():
        out = watch.feed(chunk)
        if out:
            yield out
    tail = watch.flush()
    if tail:
        yield tail
