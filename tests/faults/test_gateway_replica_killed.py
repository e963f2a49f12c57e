"""One of two gateway replicas (two uvicorn processes, one Redis) SIGKILLed while requests flow.

- A cold version asked for on both replicas at once is loaded once (single-flight across them:
  one request leads the load, as the pool's demand history marks it).
- The tenant's in-flight cap holds across the two (its two streams on replica 1 fill it).
- Replica 1 is killed in the middle of those streams: each caller retries on replica 2 and gets
  its whole answer; what replica 1 held in the shared counts is given back by replica 2's
  reaper once replica 1's lease lapses (GATEWAY_REPLICA_LEASE_SECONDS), not after the counters'
  one-hour TTL; the cap still holds on replica 2 afterwards (two requests held in flight by a
  paused engine fill it), and nothing is left held at the end.

The session's real CPU engine A (B down) and its worker; two gateway replicas of the test's own.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest
from django.utils import timezone

from tests.faults.record import FaultRecord, wait_until
from tests.fixtures.gateway import running_gateway_process
from tests.gateway.hostile_support import (
    chat,
    one_engine_fixture,  # noqa: F401 - fixture
    paused_engine,
    redis_int,
)
from tests.gateway.test_hostile_engines import _save, token
from tests.workers.fleet import servable_version
from workers import shared_state
from workers.models import FleetAction

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
LEASE_S = 10.0  # the default GATEWAY_REPLICA_LEASE_SECONDS
RETRY_FOR_S = 90.0  # a caller's patience; well past a lease, far short of the old 1 h TTL
# Big events (20 top logprobs each) read slowly: the socket's buffers fill and each stream runs
# as long as its caller reads (seconds), however fast the engine is.
STREAM = {
    "messages": [{"role": "user", "content": "Tell me about tea."}],
    "stream": True,
    "max_tokens": 900,
    "ignore_eos": True,
    "logprobs": True,
    "top_logprobs": 20,
}
READ_PAUSE_S = 0.005  # per event


class Caller:
    """Streams one answer; on a cut or a refusal, retries on the other replica (the
    `Retry-After` it was given), until it has a whole answer or runs out of patience."""

    def __init__(self, bases: list[str], tok: str) -> None:
        self.bases = bases
        self.tok = tok
        self.seen: list[str] = []  # what each try ended with
        self.tokens = 0
        self.done = False
        self.ok_at: float | None = None

    def run(self) -> None:
        deadline = time.monotonic() + RETRY_FOR_S
        at = 0
        while time.monotonic() < deadline:
            base = self.bases[at % len(self.bases)]
            try:
                with httpx.stream(
                    "POST",
                    base + "/v1/chat/completions",
                    json={"model": "tiny-llama", **STREAM},
                    headers={"authorization": f"Bearer {self.tok}"},
                    timeout=60,
                ) as reply:
                    if reply.status_code != 200:
                        reply.read()
                        self.seen.append(f"{reply.status_code} {reply.json()['error']['code']}")
                        time.sleep(float(reply.headers.get("retry-after", "1")))
                        continue
                    tokens = 0
                    for line in reply.iter_lines():
                        if line.startswith("data:") and '"content":"' in line:
                            tokens += 1
                            time.sleep(READ_PAUSE_S)
                        if line.strip() == "data: [DONE]":
                            self.tokens, self.done = tokens, True
                            self.ok_at = time.monotonic()
                            self.seen.append("200")
                            return
                    self.seen.append("cut")
            except httpx.TransportError as exc:
                self.seen.append(type(exc).__name__)
            at += 1  # the other replica


def test_a_gateway_replica_killed_while_requests_flow_loses_nothing_and_holds_nothing(
    one_engine, celery_worker_process, tmp_path
):
    fleet = one_engine
    world = fleet.world
    _save(world.acme, max_in_flight_requests=4, quota_requests_per_minute=100_000)
    alice = token(world, "alice", world.acme)
    cold = servable_version(world.support, tmp_path, seed=821)
    env = {"GATEWAY_REFRESH_SECONDS": "0", "GATEWAY_REPLICA_LEASE_SECONDS": str(LEASE_S)}
    queue = celery_worker_process["queue"]
    with (
        running_gateway_process(queue, **env) as (one, one_proc),
        running_gateway_process(queue, **env) as (two, _two_proc),
    ):
        # Single-flight across the two: four callers, two on each replica, one load.
        asked_at = timezone.now()
        results: list[int] = []

        def ask(base: str) -> None:
            reply = chat(base, alice, {"model": "support", "max_tokens": 2})
            results.append(reply.status_code)

        askers = [threading.Thread(target=ask, args=(b,)) for b in (one, two, one, two)]
        for t in askers:
            t.start()
        for t in askers:
            t.join()
        assert results == [200] * 4
        loads = FleetAction.objects.filter(
            served_name=cold.served_name, kind="load", ok=True, created_at__gte=asked_at
        ).count()
        assert loads == 1
        # The load was led once across the two replicas: one request marked as the one that
        # started it (each replica's own first request would lead it without the shared claim;
        # the load itself is idempotent, so the count of loads alone could not tell).
        leaders = [
            d
            for d in shared_state.demand_history(fleet.a.pool)
            if d.name == cold.served_name and d.missed
        ]
        assert len(leaders) == 1, leaders

        # Two streams on replica 1 fill the tenant's cap; replica 2 refuses a third.
        _save(world.acme, max_in_flight_requests=2)  # a save: both replicas' tables follow
        # Counted in Redis, not seen by the callers: a caller may read its first token only
        # after the gateway has written the whole stream (and given its hold back).
        tenant_flight = f"lp:gw:tflight:{world.acme.id}"

        def held_reaches(count: int, what: str) -> None:
            wait_until(lambda: redis_int(tenant_flight) == count, timeout=120, what=what)

        held_reaches(0, "no hold left")
        callers = [Caller([one, two], alice) for _ in range(2)]
        threads = [threading.Thread(target=c.run) for c in callers]
        for t in threads:
            t.start()
        held_reaches(2, "both streams held")
        refused = chat(two, alice, {"model": "tiny-llama", "max_tokens": 2})
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "tenant_concurrency_limit_exceeded"

        # Replica 1 dies in the middle of both streams.
        os.killpg(one_proc.pid, signal.SIGKILL)
        one_proc.wait()
        killed_at = time.monotonic()
        for t in threads:
            t.join()
        for c in callers:
            assert c.done, c.seen  # each caller got its whole answer, from replica 2
        heal_s = round(min(c.ok_at or killed_at for c in callers) - killed_at, 2)
        # The cap still holds on replica 2: its own holds were not reaped with replica 1's.
        # The engine paused, two requests stay in flight on replica 2 for as long as the check
        # takes (a stream, even one nobody reads, can end at the gateway before it: its whole
        # tail fits in the sockets' buffers on loopback).
        held_reaches(0, "the callers' holds back")
        holders = [
            threading.Thread(
                target=lambda: chat(two, alice, {"model": "tiny-llama", "max_tokens": 2})
            )
            for _ in range(2)
        ]
        with paused_engine(fleet.handle_a):
            for t in holders:
                t.start()
            held_reaches(2, "both requests admitted on replica 2")
            over = chat(two, alice, {"model": "tiny-llama", "max_tokens": 2})
            assert over.status_code == 429, over.text
            assert over.json()["error"]["code"] == "tenant_concurrency_limit_exceeded"
        for t in holders:
            t.join()
        # Nothing left held once every request ended.
        held_reaches(0, "the tenant's in-flight count back to 0")
        assert redis_int(f"lp:gw:conc:{cold.served_name}") == 0
        assert cold.served_name not in shared_state.inflight_counts(fleet.a.name)

    cut = sum(1 for c in callers for s in c.seen if s not in ("200",) and not s.startswith("429"))
    refusals = sum(1 for c in callers for s in c.seen if s.startswith("429"))
    FaultRecord(
        fault="gateway-replica-killed",
        title="One of two gateway replicas SIGKILLed in the middle of two streams "
        "(one Redis; the tenant at its in-flight cap)",
        part="gateway",
        caller_saw=f"both streams cut ({cut} x cut or connection error); retried on the other "
        f"replica: {refusals} x 429 tenant_concurrency_limit_exceeded while the dead replica's "
        f"holds were kept, then 2 x 200 whole answers ({callers[0].tokens} and "
        f"{callers[1].tokens} tokens)",
        heal_s=heal_s,
        lost=f"nothing: the dead replica's holds given back by the other's reaper (lease "
        f"{LEASE_S:.0f} s; was the counters' 1 h TTL); the cap still held on the live replica; "
        "a cold version asked on both replicas at once loaded once; no count left held",
        test="tests/faults/test_gateway_replica_killed.py::"
        "test_a_gateway_replica_killed_while_requests_flow_loses_nothing_and_holds_nothing",
    ).write()
