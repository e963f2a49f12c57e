"""A lean Redis path for the gateway's two hot scripts: admission before the engine sees a
request, release after it ends (gateway.limits).

Why not redis-py here: on an idle core, each layer of library code costs many times its warm CPU
(docs/benchmarks.md, "Where the p50 goes"), and redis-py's command path (a pool
behind a condition, a retry wrapper, a timeout scope per read and per write, a stream layer)
took 0.66 ms (p50) for the admission script after 50 ms idle where this path takes 0.39 ms
(bench/script_link.py, docs/benchmarks.md). This module is only the transport: hiredis packs
commands and parses replies (the same reader redis-py uses), an asyncio Protocol takes bytes
without a stream layer, one timer bounds each round trip. Everything else in the gateway still
talks through redis-py.

Kept from redis-py: its exception classes (every failure is a RedisError, so the gateway fails
closed as before), EVALSHA with one EVAL when the server does not know the script (NOSCRIPT: it
did not run), the client's own address, database, credentials, TLS, name and pool size.
Never retried: a script that may have run is not sent twice (the admission's ledger covers an
answer that was lost). A connection whose round trip timed out, was cancelled or broke is
closed, never reused, so a late answer cannot reach another call. One deadline bounds a whole
call: the wait for a free connection, connecting, the handshake and the round trips (a NOSCRIPT
answer's EVAL included), so a stalled Redis costs a caller one timeout, not one per step.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
from collections.abc import Sequence
from typing import Any, cast

import hiredis
from redis import asyncio as aioredis
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

DEFAULT_TIMEOUT_S = 2.0  # a client built without a socket timeout still never waits forever


def _left(deadline: float) -> float:
    """Seconds until `deadline` (the loop's time); a RedisTimeoutError once it has passed."""
    left = deadline - asyncio.get_running_loop().time()
    if left <= 0:
        raise RedisTimeoutError("Redis did not answer in time.")
    return left


def _pack(parts: Sequence[str | int]) -> bytes:
    # hiredis's stub types its argument as a one-element tuple; it takes any length.
    return hiredis.pack_command(tuple(parts))  # type: ignore[arg-type]


class _Connection(asyncio.Protocol):
    """One Redis connection, one round trip at a time."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader(replyError=ResponseError)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Any] | None = None
        self.broken = False
        self.expected: int | None = None  # None: the waiter takes one reply; n: a list of n
        self.replies: list[Any] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        waiter = self.waiter
        if waiter is None or waiter.done():
            self.broken = True  # bytes nobody asked for: the stream is out of step
            return
        try:
            reply = self.reader.gets()
            if self.expected is not None:
                while reply is not False:
                    self.replies.append(reply)
                    if len(self.replies) == self.expected:
                        reply = self.replies
                        break
                    reply = self.reader.gets()
        except hiredis.ProtocolError as err:
            self._fail(RedisConnectionError(f"Redis sent a malformed reply: {err}"))
            return
        if reply is not False:
            self.waiter = None
            waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"Connection to Redis lost: {exc or 'closed by peer'}"))

    def _fail(self, err: Exception) -> None:
        self.broken = True
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(err)

    async def ask(self, packed: bytes, timeout: float, replies: int | None = None) -> Any:
        """Send one command, wait for its reply; or, given `replies`, that many commands packed
        together and the list of their replies, in order. A ResponseError is returned, not
        raised."""
        if self.broken or self.transport is None or self.transport.is_closing():
            raise RedisConnectionError("Connection to Redis lost.")
        self.expected, self.replies = replies, []
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        self.waiter = waiter
        self.transport.write(packed)
        timer = loop.call_later(
            timeout, self._fail, RedisTimeoutError(f"Redis did not answer within {timeout:g} s.")
        )
        try:
            return await waiter
        finally:
            timer.cancel()

    def close(self) -> None:
        self.broken = True
        if self.transport is not None:
            self.transport.close()


class Script:
    """A Lua script run by its SHA1, sent whole once when the server does not hold it."""

    def __init__(self, link: ScriptLink, source: str) -> None:
        self.link = link
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis's script id

    async def __call__(
        self, *, keys: Sequence[str], args: Sequence[str | int], deadline: float | None = None
    ) -> Any:
        return await self.link.run(self, keys, args, deadline)

    async def many(self, calls: Sequence[tuple[Sequence[str], Sequence[str | int]]]) -> list[Any]:
        """Run the script once per (keys, args), all sent in one round trip (pipelined, not a
        transaction: each runs whole and alone, as a single call does); each call's reply in
        order, a script error returned in its place rather than raised."""
        return await self.link.run_many(self, calls)


class ScriptLink:
    """Pooled connections for scripts, from a redis-py client's own settings.

    At most `max_connections` at once; a caller past that waits (within the timeout) for one to
    come back, as the gateway's BlockingConnectionPool does, rather than fail under a burst."""

    def __init__(self, client: aioredis.Redis) -> None:
        pool = client.connection_pool
        kwargs = dict(pool.connection_kwargs)
        self.timeout = kwargs.get("socket_timeout") or DEFAULT_TIMEOUT_S
        self.connect_timeout = kwargs.get("socket_connect_timeout") or self.timeout
        self.max_connections = max(1, int(pool.max_connections or 64))
        self._ssl = None
        if issubclass(pool.connection_class, SSLConnection):
            self._ssl = pool.connection_class(**kwargs).ssl_context.get()
        self._path = (
            kwargs.get("path")
            if issubclass(pool.connection_class, UnixDomainSocketConnection)
            else None
        )
        self._host = kwargs.get("host", "localhost")
        self._port = int(kwargs.get("port", 6379))
        self._hello = self._handshake(kwargs)
        self._idle: list[_Connection] = []
        self._waiters: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()
        self._open = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    @staticmethod
    def _handshake(kwargs: dict[str, Any]) -> list[bytes]:
        commands: list[tuple[str | int, ...]] = []
        if kwargs.get("password"):
            user = kwargs.get("username")
            commands.append(
                ("AUTH", user, kwargs["password"]) if user else ("AUTH", kwargs["password"])
            )
        if kwargs.get("db"):
            commands.append(("SELECT", int(kwargs["db"])))
        if kwargs.get("client_name"):
            commands.append(("CLIENT", "SETNAME", kwargs["client_name"]))
        return [_pack(c) for c in commands]

    def script(self, source: str) -> Script:
        return Script(self, source)

    def deadline(self) -> float:
        """The event loop's time by which a call starting now must be answered."""
        return asyncio.get_running_loop().time() + self.timeout

    async def run(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[str | int],
        deadline: float | None = None,
    ) -> Any:
        """Run `script`, answered by `deadline` (the loop's time; default: one timeout)."""
        deadline = self.deadline() if deadline is None else deadline
        reply = await self.execute(
            "EVALSHA", script.sha, len(keys), *keys, *args, deadline=deadline
        )
        if isinstance(reply, ResponseError) and str(reply).startswith("NOSCRIPT"):
            reply = await self.execute(
                "EVAL", script.source, len(keys), *keys, *args, deadline=deadline
            )
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def run_many(
        self, script: Script, calls: Sequence[tuple[Sequence[str], Sequence[str | int]]]
    ) -> list[Any]:
        """Script.many: one write of every EVALSHA, their replies read together (one deadline
        for all); a call the server did not hold the script for did not run, and is sent again
        whole on its own."""
        if not calls:
            return []
        deadline = self.deadline()
        packed = b"".join(
            _pack(("EVALSHA", script.sha, len(keys), *keys, *args)) for keys, args in calls
        )
        replies = list(await self._round_trip(packed, len(calls), deadline))
        for i, reply in enumerate(replies):
            if isinstance(reply, ResponseError) and str(reply).startswith("NOSCRIPT"):
                keys, args = calls[i]
                replies[i] = await self.execute(
                    "EVAL", script.source, len(keys), *keys, *args, deadline=deadline
                )
        return replies

    async def execute(self, *parts: str | int, deadline: float | None = None) -> Any:
        """One command on a pooled connection, answered by `deadline` (the loop's time; default:
        one timeout from now); its reply (a ResponseError returned as is)."""
        deadline = self.deadline() if deadline is None else deadline
        return await self._round_trip(_pack(parts), None, deadline)

    async def _round_trip(self, packed: bytes, replies: int | None, deadline: float) -> Any:
        """`packed` (one command, or `replies` commands: their list of replies) on a pooled
        connection, answered by `deadline`."""
        conn = self._take() or await self._connection(deadline)
        try:
            left = _left(deadline)
        except RedisTimeoutError:
            self._give(conn, True)  # nothing was sent on it
            raise
        reusable = False
        try:
            reply = await conn.ask(packed, left, replies)
            reusable = True
            return reply
        finally:
            self._give(conn, reusable)

    async def aclose(self) -> None:
        for conn in self._idle:
            conn.close()
        self._open -= len(self._idle)
        self._idle.clear()

    # --- the pool -----------------------------------------------------------------------

    def _take(self) -> _Connection | None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self._idle.clear()
            self._waiters.clear()
            self._open = 0
            self._loop = loop
        while self._idle:
            conn = self._idle.pop()
            if not conn.broken:
                return conn
            self._open -= 1
        return None

    async def _connection(self, deadline: float) -> _Connection:
        if self._open >= self.max_connections:
            waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    handed = await waiter
            except BaseException as err:
                if waiter.done() and not waiter.cancelled():  # handed over as this caller left
                    late = waiter.result()
                    if late is not None:
                        self._give(late, True)
                    else:
                        self._wake(None)
                if isinstance(err, TimeoutError):
                    raise RedisConnectionError("No Redis connection came free in time.") from None
                raise
            if handed is not None:
                return handed
            # A connection was closed: its place is this caller's.
        self._open += 1
        try:
            return await self._connect(deadline)
        except BaseException:
            self._open -= 1
            self._wake(None)
            raise

    async def _connect(self, deadline: float) -> _Connection:
        loop = asyncio.get_running_loop()
        where = self._path or f"{self._host}:{self._port}"
        deadline = min(deadline, loop.time() + self.connect_timeout)
        try:
            async with asyncio.timeout_at(deadline):
                if self._path:
                    _, conn = await loop.create_unix_connection(_Connection, self._path)
                else:
                    _, conn = await loop.create_connection(
                        _Connection, self._host, self._port, ssl=self._ssl
                    )
        except (OSError, TimeoutError) as err:
            raise RedisConnectionError(f"Error connecting to Redis at {where}: {err!r}") from err
        try:
            for command in self._hello:
                reply = await conn.ask(command, _left(deadline))
                if isinstance(reply, ResponseError):
                    raise reply
        except BaseException:
            conn.close()
            raise
        return conn

    def _give(self, conn: _Connection, reusable: bool) -> None:
        if not reusable or conn.broken or conn.reader.has_data():
            conn.close()
            self._open -= 1
            self._wake(None)
        elif not self._wake(conn):
            self._idle.append(conn)

    def _wake(self, conn: _Connection | None) -> bool:
        """Hand `conn` (or, with None, the right to open one) to the first caller waiting."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)  # None: the caller opens its own, counted when it does
                return True
        return False
