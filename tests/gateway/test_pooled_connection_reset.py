"""A pooled keep-alive connection whose far end is gone is tried once more on a fresh one before
the engine is blamed (the first request after an engine restart succeeds).

An engine stopped on this machine closes its sockets, so the gateway's pool sees the close before
the next request and never reuses the dead connection: `test_hostile_engines`' restart test passes
with or without the retry. The case the retry exists for is a node whose kernel forgot the
connection (a restarted machine or pod on the same address): the gateway learns it only when its
next request on that connection is answered with a reset. A TCP link on loopback between the
gateway's pool and a real engine cuts the connections that way: after `forget()`, a request on a
connection opened before it is answered with a RST, and new connections pass as before.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

import orjson
import pytest

from gateway.exchange import FAILED, SENT, Exchange, Outcome
from gateway.request_schema import Checked
from gateway.routes import EngineInfo
from gateway.upstream import EnginePool
from tests.fixtures.engines import EngineHandle

pytestmark = [pytest.mark.engine]


class ForgetfulLink:
    """Relays TCP between a client and an upstream; `forget()` makes every connection open at
    that moment answer its next bytes from the client with a reset, as a restarted peer does."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.accepted = 0
        self.resets = 0
        self._generation = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def forget(self) -> None:
        self._generation += 1

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        born = self._generation
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        back = asyncio.create_task(self._pipe(up_reader, writer))
        self._tasks.add(back)
        try:
            while data := await reader.read(65536):
                if self._generation != born:  # the peer forgot this connection: RST
                    self.resets += 1
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    break
                up_writer.write(data)
                await up_writer.drain()
        finally:
            back.cancel()
            up_writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


async def _chat(pool: EnginePool, engine: EngineInfo) -> tuple[Outcome, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    body = orjson.dumps(
        {
            "model": engine.served_model_name,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 2,
        }
    )
    exchange = Exchange(
        pool, send, budget_s=120.0, write_deadline_s=30.0, started=time.perf_counter()
    )
    checked = Checked(stream=False, wants_usage=False, weight=1)
    outcome = await exchange.run(engine, "/v1/chat/completions", body, checked, False)
    return outcome, sent


async def test_a_pooled_connection_the_engine_forgot_is_retried_on_a_fresh_one(
    engine_a: EngineHandle,
):
    link = ForgetfulLink(engine_a.port)
    port = await link.start()
    engine = EngineInfo(
        name="a",
        url=f"http://127.0.0.1:{port}",
        key=engine_a.engine_key,
        pool="",
        base_model_id=0,
        served_model_name=engine_a.served_model_name,
        max_lora_rank=engine_a.max_lora_rank,
        max_loras=engine_a.max_loras,
        max_cpu_loras=engine_a.max_cpu_loras,
        capacity=8,
    )
    pool = EnginePool()
    try:
        first, relayed = await _chat(pool, engine)
        assert (first.sent, first.status, first.ok) == (SENT, 200, True)
        # A whole answer goes to the caller whole: its length in the head, then one body.
        head, whole = relayed
        assert (head["type"], whole["type"], whole.get("more_body")) == (
            "http.response.start",
            "http.response.body",
            None,
        )
        assert dict(head["headers"])[b"content-length"] == b"%d" % len(whole["body"])
        assert link.accepted == 1  # one connection, now idle in the pool

        link.forget()
        second, sent = await _chat(pool, engine)
        # The pooled connection was really used and reset, then a fresh one answered.
        assert link.resets == 1
        assert link.accepted == 2
        assert second.sent != FAILED, "the engine was blamed for a connection it had forgotten"
        assert (second.sent, second.status, second.ok) == (SENT, 200, True)
        reply = orjson.loads(b"".join(m.get("body", b"") for m in sent[1:]))
        assert reply["choices"][0]["message"]["content"] is not None
    finally:
        await pool.aclose()
        await link.close()
