"""What the hostile-caller tests share: two gateway replicas with a short time budget and write
deadline, the fleet with engine A only (a marked engine then shows as a 503 on the next request),
the engines' own counters, and the gateway's Redis counts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.fixtures.engines import EngineHandle
from tests.fixtures.gateway import running_gateway
from workers import shared_state

BUDGET_S = 60.0  # the replicas' GATEWAY_REQUEST_TIMEOUT_SECONDS
SHARED_WINDOW_S = 1.0  # the replicas' GATEWAY_FAIR_SHARED_WINDOW_SECONDS
WRITE_DEADLINE_S = 1.0  # their GATEWAY_WRITE_DEADLINE_SECONDS
PROMPT = [{"role": "user", "content": "Tell me about tea."}]


@pytest.fixture(name="replicas", scope="module")
def replicas_fixture(celery_worker_process) -> Iterator[tuple[str, str]]:
    """Two gateway processes on the same Redis and database."""
    env = {
        "GATEWAY_REFRESH_SECONDS": "0",
        "GATEWAY_REQUEST_TIMEOUT_SECONDS": str(BUDGET_S),
        "GATEWAY_WRITE_DEADLINE_SECONDS": str(WRITE_DEADLINE_S),
        # Long enough that a wrongly marked engine is still out at the next request.
        "GATEWAY_ENGINE_COOLDOWN_SECONDS": "60",
        # Each test's tenant alone on the engine a second after the last test's other tenant
        # (the budget and unread-stream tests send requests heavier than a shared share).
        "GATEWAY_FAIR_SHARED_WINDOW_SECONDS": str(SHARED_WINDOW_S),
    }
    queue = celery_worker_process["queue"]
    with running_gateway(queue, **env) as one, running_gateway(queue, **env) as two:
        yield one, two


def clear_gateway_counts() -> None:
    """Rates, in-flight counts and measurements other tests (this minute) left in Redis (not
    the tables' generation counters: replicas compare those)."""
    client = shared_state.client()
    for pattern in ("lp:gw:rpm:*", "lp:gw:tflight:*", "lp:gw:conc:*", "lp:gwm:*", "lp:usage:*"):
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)


@pytest.fixture(name="one_engine")
def one_engine_fixture(worker_fleet):
    """Engine A alone serves (B is down): a request that marked A failed makes the next a 503."""
    worker_fleet.b.state = "down"
    worker_fleet.b.save()  # a save: the gateways' tables follow saves
    clear_gateway_counts()
    yield worker_fleet
    clear_gateway_counts()


def engine_counter(handle: EngineHandle, name: str) -> float:
    """The sum of an engine's Prometheus series `name` (all labels)."""

    async def read() -> str:
        async with handle.client() as client:
            return await client.metrics()

    total = 0.0
    for line in asyncio.run(read()).splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def chat(base: str, token: str, body: dict, timeout: float = 120.0) -> httpx.Response:
    return httpx.post(
        base + "/v1/chat/completions",
        json={"messages": PROMPT, **body},
        headers={"authorization": f"Bearer {token}"},
        timeout=timeout,
    )


def complete(base: str, token: str, body: dict, timeout: float = 120.0) -> httpx.Response:
    return httpx.post(
        base + "/v1/completions",
        json=body,
        headers={"authorization": f"Bearer {token}"},
        timeout=timeout,
    )


def wait_for(check: Callable[[], bool], within_s: float = 120.0) -> bool:
    """Poll until `check()` holds (True) or `within_s` passes (False): a bound on a wait, never
    an assertion on how long something took."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def redis_int(key: str, field: str | None = None) -> int:
    client = shared_state.client()
    value = client.hget(key, field) if field else client.get(key)
    return int(float(value or 0))


def unread_stream(base: str, tok: str, body: bytes) -> socket.socket:
    """A caller that sends a streaming request and never reads a byte (a tiny receive window)."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect((host, int(port)))
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {tok}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


@contextlib.contextmanager
def paused_engine(handle: EngineHandle) -> Iterator[None]:
    """The engine's whole process group stopped (SIGSTOP) for the block: requests sent to it
    stay in flight, holding what they hold at the gateway, however fast the engine would have
    answered them or however much of a stream the sockets' buffers would have taken."""
    pid = handle.process.pid
    assert pid is not None, "the engine is not running"
    group = os.getpgid(pid)
    os.killpg(group, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(group, signal.SIGCONT)


def room_in_this_minute(seconds: float = 20.0) -> None:
    """Start with at least `seconds` left in the current minute: the requests-per-minute count is
    per calendar minute, so requests that straddle a minute boundary are counted in two."""
    left = 60.0 - time.time() % 60.0
    if left < seconds:
        time.sleep(left + 0.1)


def past_the_sharing_window() -> None:
    """Wait out the replicas' sharing window: the previous test's requests came from other
    tenants (every test makes its own), and while the engine counts as shared a request
    heavier than three quarters of it is refused at once (429 fair_share_exceeded)."""
    time.sleep(SHARED_WINDOW_S + 0.2)
