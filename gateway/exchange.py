"""One request's exchange with one engine, and whose fault it was when it went wrong.

Only a connection-level failure before any reply byte reached the caller (refused, reset,
closed; for a stream, also after the engine's head and before its first piece) says the engine
is gone: the request may move and the engine is marked. Everything else is the request's own
outcome and moves nothing: an engine's 4xx or 5xx goes back to the caller as it is; a request
over its time budget is aborted at the engine (its connection closed: vLLM cancels a request
whose client went away) and answered 504; a caller that stops reading a stream for longer than
the write deadline has its request aborted the same way, and its slots come back at once.
A pooled connection found dead (an engine restarted since it was opened) is tried once more
on a fresh connection before the engine is blamed.

The prober's verdict is the other thing that blames an engine: one whose core stalled keeps
its connections open and answers nothing, so what waits on it would wait out its budget. When
the tables show the engine down, `engine_gone` stops the wait: a request that has sent the
caller nothing moves to another engine (a stream's response head is held until its first piece
for this), a stream under way ends with an error event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from gateway.errors import GatewayError
from gateway.request_schema import Checked
from gateway.routes import EngineInfo
from gateway.upstream import EnginePool, StreamWatch, relay

Send = Callable[[dict[str, Any]], Awaitable[None]]
SENT, FAILED, STALE, GONE = "sent", "failed", "stale", "gone"
# Before any reply byte, these mean the engine (or the connection to it) is gone.
log = logging.getLogger(__name__)
CONNECTION_ERRORS = (aiohttp.ClientConnectionError, ConnectionError)
# While a reply passes through, these mean it was cut short.
STREAM_ERRORS = (aiohttp.ClientError, ConnectionError)


@dataclass
class Outcome:
    sent: str  # SENT, or FAILED / STALE / GONE before anything reached the caller
    ok: bool = False
    caller_fault: bool = False  # a 4xx, a slow reader: nothing the engine did
    status: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_token_at: float | None = None
    response_id: str = ""  # the engine's completion id (gen_ai.response.id)
    # The reply as relayed, kept only when asked (a release plan's sample) and whole.
    body: bytes | None = None


class SlowReader(Exception):
    """The caller took no bytes for the write deadline."""


def engine_down() -> GatewayError:
    return GatewayError(
        502,
        "The engine serving this request stopped answering (its health check marked it down); "
        "the reply ends here. Send the request again.",
        code="engine_down",
        err_type="server_error",
    )


def timed_out(budget_s: float) -> GatewayError:
    return GatewayError(
        504,
        f"The request ran past its time budget ({budget_s:g} s) and was stopped. "
        "Ask for fewer tokens or sequences.",
        code="request_timeout",
        err_type="server_error",
    )


class Exchange:
    """Sends one request body to one engine and passes the reply to the caller."""

    def __init__(
        self,
        engines: EnginePool,
        send: Send,
        *,
        budget_s: float,
        write_deadline_s: float,
        started: float,
    ) -> None:
        self.engines = engines
        # A reply sampled for a release plan's live checks is kept up to this size (keep_reply).
        self.capture_bytes = 0
        self._captured: list[bytes] | None = None
        self._captured_size = 0
        self.send = send
        self.budget_s = budget_s
        self.write_deadline_s = write_deadline_s
        self.started = started
        self.begun = False  # the caller has the response's start: no other engine now
        self.whole = False  # a whole (not streamed) answer came from the engine: it is relayed
        self.stream = False
        self.gone = False  # the prober marked the engine down while this waited on it
        self.watch: StreamWatch | None = None
        self._budget: asyncio.Timeout | None = None  # set while the budget runs
        self.headers: dict[str, str] | None = None  # the request's traceparent (gateway.tracing)

    def engine_gone(self) -> None:
        """The tables show this request's engine down: stop waiting on it (see the module's
        docstring). A whole answer already on its way to the caller is left to finish."""
        if (self.begun or self.whole) and not self.stream:
            return
        budget = self._budget
        if budget is not None and not budget.expired():
            self.gone = True
            budget.reschedule(asyncio.get_running_loop().time())  # ends the wait at once

    async def run(
        self, engine: EngineInfo, path: str, body: bytes, checked: Checked, adapter_request: bool
    ) -> Outcome:
        """Send `body` to `path` on `engine` and pass its reply to the caller (`checked` says
        whether it streams and whether its caller asked for the usage chunk); for an
        `adapter_request`, a 404 means the engine no longer holds the adapter (STALE)."""
        left = self.budget_s - (time.perf_counter() - self.started)
        budget = asyncio.timeout(max(0.0, left))
        self.stream = stream = checked.stream
        try:
            async with budget:
                self._budget = budget
                response = await self._post(engine, path, body)
                if response is None:
                    return Outcome(FAILED)
                try:
                    return await self._reply(response, checked, adapter_request)
                finally:
                    if response.content.at_eof():
                        response.release()  # read to the end: the connection is kept
                    else:
                        response.close()  # aborted or cut short: the engine stops the request
        except TimeoutError:
            if not budget.expired():
                raise
            if self.gone and not self.begun:
                return Outcome(GONE)  # nothing reached the caller: another engine
            error = engine_down() if self.gone else timed_out(self.budget_s)
            await self._abort(error, stream)
            return self._cut_short(error.status)
        except SlowReader:
            return self._cut_short(499, caller_fault=True)
        finally:
            self._budget = None

    def _cut_short(self, status: int, *, caller_fault: bool = False) -> Outcome:
        """A reply stopped before its end (budget, slow reader, engine down)."""
        return self._billed(Outcome(SENT, caller_fault=caller_fault, status=status))

    def _billed(self, outcome: Outcome) -> Outcome:
        """The tokens the reply carried: a stream cut before its usage chunk (the engine died,
        the budget ran out, the reader stopped) is billed the tokens it delivered."""
        if self.watch is not None:
            outcome.prompt_tokens = self.watch.prompt_tokens
            outcome.completion_tokens = self.watch.completion_tokens or self.watch.streamed
        if outcome.ok and self._captured is not None:
            outcome.body = b"".join(self._captured)
        return outcome

    async def _post(
        self, engine: EngineInfo, path: str, body: bytes
    ) -> aiohttp.ClientResponse | None:
        headers = self.headers
        try:
            return await self.engines.session(engine).post(path, data=body, headers=headers)
        except CONNECTION_ERRORS as exc:
            pooled = exc
        # Once more on a fresh connection: a pooled one may have outlived an engine restart.
        try:
            return await self.engines.fresh_post(engine, path, body, headers)
        except CONNECTION_ERRORS as exc:
            # The engine is then kept out for its cooldown: say why (a load test's lone 503
            # engine_unavailable could not be traced without it).
            log.warning(
                "gateway: engine %s unreachable: %r (pooled connection: %r)",
                engine.name,
                exc,
                pooled,
            )
            return None

    async def _reply(
        self, response: aiohttp.ClientResponse, checked: Checked, adapter_request: bool
    ) -> Outcome:
        status = response.status
        if status == 404 and adapter_request:
            await response.read()  # the engine no longer holds the adapter
            return Outcome(STALE, status=status)
        stream = checked.stream
        watch = self.watch = StreamWatch(
            started=self.started, strip_usage=stream and not checked.wants_usage
        )
        ok = status < 400
        content_type = response.headers.get("content-type", "application/json").encode()
        head: dict[str, Any] = {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type)],
        }
        outcome = Outcome(SENT, ok=ok, caller_fault=400 <= status < 500, status=status)
        try:
            if stream and ok:
                outcome.ok = await self._relay(response, head, watch)
            else:
                await self._whole(response, head, watch, ok)
                outcome.first_token_at = watch.first_token_at
                outcome.response_id = watch.response_id
                return self._billed(outcome)
        except STREAM_ERRORS:
            if stream and not self.begun:
                # The engine went away after its head, before its first piece: the caller has
                # nothing yet, so the request may move like one refused a connection.
                log.warning(
                    "gateway: the engine at %s went away before a stream's first piece",
                    response.url.origin(),
                )
                return Outcome(FAILED)
            outcome.ok = False
            await self._begin(head)
            await self._deliver(_error_event("The engine went away during the reply."))
        await self._deliver({"type": "http.response.body", "body": b"", "more_body": False})
        outcome.first_token_at = watch.first_token_at
        outcome.response_id = watch.response_id
        return self._billed(outcome)

    async def _whole(
        self, response: aiohttp.ClientResponse, head: dict[str, Any], watch: StreamWatch, ok: bool
    ) -> None:
        """A whole (not streamed) answer goes out whole: its length in the head, then one body
        message (two writes to the caller's socket, not three pieces of chunked framing)."""
        self.whole = True  # the engine has answered: the answer is left to finish
        data = await response.read()
        if ok:
            watch.whole(data)
            self._capture(data)
        head["headers"].append((b"content-length", b"%d" % len(data)))
        await self._begin(head)
        await self._deliver({"type": "http.response.body", "body": data})

    async def _relay(
        self, response: aiohttp.ClientResponse, head: dict[str, Any], watch: StreamWatch
    ) -> bool:
        """Pass a stream on piece by piece; whether it ended whole (its [DONE], no error).
        The head waits for the first piece (vLLM sends its head before the engine core has done
        anything): until then the request may still move elsewhere."""
        async for piece in relay(response, watch):
            self._capture(piece)
            await self._begin(head)
            await self._deliver({"type": "http.response.body", "body": piece, "more_body": True})
        await self._begin(head)
        if not watch.done:  # the engine's stream ended without its [DONE]
            await self._deliver(_error_event("The engine ended the stream early."))
        return watch.done and not watch.error

    def keep_reply(self, max_bytes: int) -> None:
        """Keep the reply (up to `max_bytes`, else not at all) for a release plan's sample."""
        if max_bytes > 0:
            self.capture_bytes = max_bytes
            self._captured = []

    def _capture(self, piece: bytes) -> None:
        if self._captured is None:
            return
        self._captured_size += len(piece)
        if self._captured_size > self.capture_bytes:
            self._captured = None  # too long to keep: this reply is not scored
            return
        self._captured.append(piece)

    async def _begin(self, head: dict[str, Any]) -> None:
        if not self.begun:
            self.begun = True  # from here the caller has the start: no other engine
            await self._deliver(head)

    async def _deliver(self, message: dict[str, Any]) -> None:
        """Hand a message to the caller's connection, within the write deadline."""
        deadline = asyncio.timeout(self.write_deadline_s)
        try:
            async with deadline:
                await self.send(message)
        except TimeoutError:
            if deadline.expired():
                raise SlowReader from None
            raise

    async def _abort(self, error: GatewayError, stream: bool) -> None:
        """Tell the caller, as far as the response allows: the whole answer if nothing was
        sent yet, an error event at the end of a stream already under way."""
        try:
            if not self.begun:
                await self._deliver(
                    {
                        "type": "http.response.start",
                        "status": error.status,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await self._deliver({"type": "http.response.body", "body": error.body()})
                return
            if stream:
                await self._deliver(_error_event(error.message, error.code))
            await self._deliver({"type": "http.response.body", "body": b"", "more_body": False})
        except SlowReader:
            pass  # the caller does not read: nothing more to tell it


def _error_event(message: str, code: str = "engine_error") -> dict[str, Any]:
    event = orjson.dumps({"error": {"message": message, "type": "server_error", "code": code}})
    return {"type": "http.response.body", "body": b"data: " + event + b"\n\n", "more_body": True}
