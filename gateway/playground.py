"""The playground's way into the gateway: a signed-in user's prompt goes through the Gateway's own
request path (limits, engine choice, single-flight cold load, fair engine slots, failover,
per-adapter metrics and usage), and the reply comes back token by token.

The caller is a user (the socket's session), never a bearer token; what they may use is decided
per prompt by gateway/playground_choices.py. Staged versions are reachable only through here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from channels.db import database_sync_to_async
from redis.exceptions import RedisError

from core.errors import ApplicationError
from gateway.app import Gateway, gateway_app
from gateway.errors import GatewayError, limits_unavailable
from gateway.playground_choices import resolve_choice, table_choice
from gateway.request import GatewayRequest

OnToken = Callable[[str], Awaitable[None]]
MAX_PROMPT_CHARS = 8000
MAX_TOKENS = 512
# OpenAI's range; 0 is greedy (the same reply to the same prompt, for comparing versions).
MAX_TEMPERATURE = 2.0


@dataclass(frozen=True)
class PlayResult:
    """One reply as the user saw it: times in ms from the prompt's arrival."""

    key: str
    ttft_ms: float | None
    tokens: int
    tokens_per_s: float | None
    total_ms: float


class TokenSink:
    """An ASGI `send` for Gateway.serve: turns the SSE reply into token callbacks as it passes.

    serve() forwards whole SSE events (gateway.upstream.StreamWatch), so each body piece holds
    complete `data:` lines; an error reply (status >= 400) arrives as one JSON body.
    """

    def __init__(self, on_token: OnToken, started: float) -> None:
        self.on_token = on_token
        self.started = started
        self.status = 0
        self.error_body = b""
        self.error: tuple[str, str] | None = None
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.pieces = 0
        self.completion_tokens = 0
        self.prompt_tokens = 0
        self._buffer = b""

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            return
        body = message.get("body", b"")
        if self.status >= 400:
            self.error_body += body
            if not message.get("more_body"):
                self.error = error_of(self.error_body, self.status)
            return
        self._buffer += body
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            await self._event(event.strip())

    async def _event(self, event: bytes) -> None:
        if not event.startswith(b"data:"):
            return
        data = event[5:].strip()
        if data == b"[DONE]":
            return
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(parsed, dict):
            return
        if "error" in parsed:
            self.error = error_of(data, 502)
            return
        usage = parsed.get("usage")
        if isinstance(usage, dict):
            self.completion_tokens = int(usage.get("completion_tokens") or 0)
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        for choice in parsed.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            text = delta.get("content") if isinstance(delta, dict) else None
            if delta is None and isinstance(choice, dict):
                text = choice.get("text")  # a completion's chunk (an eval case's `prompt`)
            if text:
                now = time.perf_counter()
                self.first_at = self.first_at or now
                self.last_at = now
                self.pieces += 1
                await self.on_token(text)

    def result(self, key: str) -> PlayResult:
        done = time.perf_counter()
        tokens = self.completion_tokens or self.pieces
        rate = None
        if self.first_at is not None and self.last_at is not None and self.last_at > self.first_at:
            # Decoding speed after the first token (the first one is TTFT's business).
            rate = (tokens - 1) / (self.last_at - self.first_at)
        ttft = (self.first_at - self.started) * 1000 if self.first_at is not None else None
        return PlayResult(key, ttft, tokens, rate, (done - self.started) * 1000)


def error_of(body: bytes, status: int) -> tuple[str, str]:
    """(code, message) from an OpenAI-shaped error body, or a generic one."""
    try:
        error = orjson.loads(body).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        error = {}
    if not isinstance(error, dict):
        error = {"message": str(error)}
    code = str(error.get("code") or f"engine_{status}")
    return f"gateway.{code}", str(error.get("message") or "The engine refused the request.")


def clean_temperature(temperature: object) -> float | None:
    """None (the engine's default sampling) or a number from 0 to 2, else a refusal."""
    if temperature is None:
        return None
    if not isinstance(temperature, int | float) or isinstance(temperature, bool):
        raise ApplicationError("playground.bad_temperature", "temperature must be a number.")
    if not 0 <= temperature <= MAX_TEMPERATURE:
        raise ApplicationError(
            "playground.bad_temperature", f"temperature must be between 0 and {MAX_TEMPERATURE:g}."
        )
    return float(temperature)


def clean_prompt(prompt: object, max_tokens: object) -> tuple[list[dict[str, str]], int]:
    """The chat messages and the token budget, or a refusal saying what to change."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ApplicationError("playground.empty_prompt", "Type a prompt first.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ApplicationError(
            "playground.prompt_too_long",
            f"The prompt has {len(prompt)} characters; the playground takes {MAX_PROMPT_CHARS}.",
        )
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise ApplicationError("playground.bad_max_tokens", "max_tokens must be a whole number.")
    if not 1 <= max_tokens <= MAX_TOKENS:
        raise ApplicationError(
            "playground.bad_max_tokens", f"max_tokens must be between 1 and {MAX_TOKENS}."
        )
    return [{"role": "user", "content": prompt}], max_tokens


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt from the playground's socket as the user sent it (play checks it): who asks,
    in which tenant, of which model (`key`: a version label or `base:<name>`), and what."""

    user: Any
    tenant_slug: str
    key: object
    text: object
    max_tokens: object
    temperature: object = None

    def payload(self) -> dict[str, Any]:
        """The chat request's body without its model, or a refusal saying what to change."""
        messages, budget = clean_prompt(self.text, self.max_tokens)
        temperature = clean_temperature(self.temperature)
        payload: dict[str, Any] = {
            "messages": messages,
            "max_tokens": budget,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if temperature is not None:
            payload["temperature"] = temperature
        return payload


async def play(
    prompt: Prompt,
    on_token: OnToken,
    *,
    started: float | None = None,
    gateway: Gateway | None = None,
) -> PlayResult:
    """Stream one reply to `prompt` for its user in the tenant, token by token to `on_token`.

    Access is checked here, on every prompt: from the gateway's tables for a member's active
    version (playground_choices.table_choice), else from the database. Refusals raise
    ApplicationError with a code: `playground.*` from the checks, `gateway.*` from the request
    path (429, 503, engine errors).
    """
    sink = TokenSink(on_token, time.perf_counter() if started is None else started)
    payload = prompt.payload()
    try:
        return await _play(gateway or gateway_app, prompt, payload, sink)
    except RedisError:
        # The same policy as /v1/ (fail closed: no tenant's limits can be checked).
        err = limits_unavailable()
        raise ApplicationError(f"gateway.{err.code}", err.message, status=err.status) from None


async def _play(
    gateway: Gateway, prompt: Prompt, payload: dict[str, Any], sink: TokenSink
) -> PlayResult:
    table = await gateway.fresh_table()
    user, tenant_slug, key = prompt.user, prompt.tenant_slug, prompt.key
    resolved = table_choice(table, user=user, tenant_slug=tenant_slug, key=key)
    if resolved is None:
        resolved = await database_sync_to_async(resolve_choice)(
            user=user, tenant_slug=tenant_slug, key=key
        )
    payload["model"] = resolved.key
    request = GatewayRequest(
        "chat",
        payload,
        resolved.route,
        resolved.target,
        table,
        resolved.tenant_id,
        send=sink,
        started=sink.started,
    )
    try:
        await gateway.serve_admitted(request)
    except GatewayError as err:
        raise ApplicationError(f"gateway.{err.code}", err.message, status=err.status) from None
    if sink.error is not None:
        raise ApplicationError(*sink.error, status=sink.status if sink.status >= 400 else 502)
    return sink.result(resolved.key)
