"""/ws/tenants/<slug>/playground/: prompts in, token frames out, one or two replies side by side.

Refused before accept when the session is anonymous (4401), the tenant out of reach (4404) or the
playground offers this user nothing there (4403); the origin is checked by the ASGI router. Every
prompt is checked again: the session first (after a log-out the socket closes 4401 unanswered,
as the live sockets do), then access (gateway.playground.play): a revoked membership or grant is
refused and the socket closed.

In:  {"prompt": "...", "models": ["support@3", "base:tiny-llama"], "max_tokens": 64,
      "temperature": 0.7}  (temperature optional: the engine's default sampling without it)
Out: first {"type": "choices", "pane": null, "choices": [{"key", "label", "status"}, ...]} (what
     the picker offers now), then {"type": "start" | "token" | "done" | "error", "pane": 0 | 1,
     ...} per prompt; errors carry a code.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict
from typing import Any

from channels.db import database_sync_to_async

from core.errors import ApplicationError
from core.socket_base import NO_LAYER, PortalSocket, session_alive
from gateway.playground import Prompt, play
from gateway.playground_choices import playground_offer

log = logging.getLogger(__name__)
MAX_PANES = 2
DEFAULT_MAX_TOKENS = 64
# Refusals that mean the user lost the tenant or the playground: the socket closes after them.
LOST_ACCESS = {"tenant.not_found": 4404, "playground.denied": 4403}
CLOSE_LOGGED_OUT = 4401


class PlaygroundConsumer(PortalSocket):
    # No channel layer: nothing is ever sent to this socket through one, and listening on the
    # Redis layer would end the socket whenever Redis goes away (the prompt's own Redis needs,
    # the gateway's limits, answer with an error frame instead: gateway.playground.play).
    channel_layer_alias = NO_LAYER
    answering: asyncio.Task[None] | None = None
    closing_code: int | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.tenant_slug = self.scope["url_route"]["kwargs"]["tenant"]
        try:
            _, choices = await database_sync_to_async(playground_offer)(
                user=user, tenant_slug=self.tenant_slug
            )
        except ApplicationError as exc:
            await self.close(code=4404 if exc.status == 404 else 4403)
            return
        await self.accept()
        # What the picker offers now: a version released (or a grant changed) after the page
        # was drawn, or while the socket was reconnecting, shows without a reload.
        await self.send_json(
            {"type": "choices", "pane": None, "choices": [asdict(c) for c in choices]}
        )

    async def disconnect(self, code: int) -> None:
        if self.answering is not None:
            self.answering.cancel()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        received = time.perf_counter()
        if self.answering is not None and not self.answering.done():
            await self.refuse("playground.busy", "Wait for the reply to finish first.")
            return
        if not isinstance(content, dict):
            await self.refuse("playground.bad_message", "Send a JSON object with a prompt.")
            return
        models = content.get("models")
        if (
            not isinstance(models, list)
            or not 1 <= len(models) <= MAX_PANES
            or not all(isinstance(m, str) for m in models)
        ):
            await self.refuse(
                "playground.bad_models", f"Pick one model, or {MAX_PANES} to compare side by side."
            )
            return
        if not await database_sync_to_async(session_alive)(self.scope.get("session")):
            await self.refuse("auth.logged_out", "The session ended; sign in again.")
            await self.close(code=CLOSE_LOGGED_OUT)
            return
        prompt, budget = content.get("prompt"), content.get("max_tokens", DEFAULT_MAX_TOKENS)
        temperature = content.get("temperature")
        self.answering = asyncio.create_task(
            self.answer(models, prompt, budget, temperature, received)
        )

    async def answer(
        self, models: list[str], prompt: object, budget: object, temperature: object, at: float
    ) -> None:
        await asyncio.gather(
            *(self.pane(i, m, prompt, budget, temperature, at) for i, m in enumerate(models))
        )
        if self.closing_code is not None:
            await self.close(code=self.closing_code)

    async def pane(
        self, pane: int, key: str, prompt: object, budget: object, temperature: object, at: float
    ) -> None:
        await self.send_json({"type": "start", "pane": pane, "model": key})

        async def on_token(text: str) -> None:
            await self.send_json({"type": "token", "pane": pane, "text": text})

        try:
            asked = Prompt(self.scope["user"], self.tenant_slug, key, prompt, budget, temperature)
            result = await play(asked, on_token, started=at)
        except ApplicationError as exc:
            await self.refuse(exc.code, exc.message, pane=pane)
            if exc.code in LOST_ACCESS:
                self.closing_code = LOST_ACCESS[exc.code]
            return
        except Exception:  # a task nobody awaits: say so on the page instead of going silent
            log.exception("playground reply failed (tenant %s, %s)", self.tenant_slug, key)
            await self.refuse(
                "playground.failed", "The reply failed on the portal's side; try again.", pane=pane
            )
            return
        await self.send_json(
            {
                "type": "done",
                "pane": pane,
                "model": key,
                "ttft_ms": result.ttft_ms,
                "tokens": result.tokens,
                "tokens_per_s": result.tokens_per_s,
                "total_ms": result.total_ms,
            }
        )

    async def refuse(self, code: str, message: str, *, pane: int | None = None) -> None:
        await self.send_json({"type": "error", "pane": pane, "code": code, "message": message})
