"""What the fleet shares through Redis: requests in flight, recent demand, and single-flight loads.

The gateway (any number of replicas) counts requests in and out here; the cache controller reads
the counts so it never evicts a version with requests in flight or queued, and reads the recent
demand to rank versions. Keys are per engine or per pool, never per request.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import NamedTuple, cast

import redis

from workers.fleet_redis import client
from workers.redis_contract.keys import FLEET, inflight_key, load_key

DEMAND_HISTORY_MAX = 5_000  # recent requests per pool the controller's DemandTracker replays
_PREFIX = FLEET


def _text(raw: bytes | str) -> str:
    # redis-py types replies as bytes | str; this client does not decode them, so they are bytes.
    return raw.decode() if isinstance(raw, bytes) else raw


def held_key(engine: str) -> str:
    """Versions the gateway holds back at the engine's pin guard (gateway.limits), by time."""
    return f"{_PREFIX}:held:{engine}"


def held_claim_key(engine: str) -> str:
    """Set while a converge pass asked for by held requests is on its way (one per engine)."""
    return f"{_PREFIX}:held-pass:{engine}"


HELD_WINDOW_S = 10.0  # a version held back this recently counts as wanting the engine now


def held_versions(engine: str, *, now: float | None = None) -> set[str]:
    """Versions with requests held back at the engine's pin guard within HELD_WINDOW_S."""
    since = (time.time() if now is None else now) - HELD_WINDOW_S
    members = cast(list[bytes], client().zrangebyscore(held_key(engine), since, "+inf"))
    return {_text(m) for m in members}


def inflight_counts(engine: str) -> dict[str, int]:
    raw = client().hgetall(inflight_key(engine))
    return {_text(k): max(0, int(v)) for k, v in raw.items() if int(v) > 0}


CLASS_FIELD = "class:"  # an engine's load hash: `class:<name>` -> the slots the class holds


def class_slots_of(load: dict[bytes, bytes] | dict[str, str]) -> dict[str, int]:
    """The slots each service class holds on an engine, from its load hash (keys.load_key: the
    `class:<name>` fields every gateway replica's admission counts, docs/classes.md)."""
    held: dict[str, int] = {}
    for key, value in load.items():
        name = _text(key)
        if name.startswith(CLASS_FIELD):
            held[name[len(CLASS_FIELD) :]] = int(float(_text(value)))
    return held


def engines_class_slots(engines: Sequence[str]) -> dict[str, dict[str, int]]:
    """Each of `engines`' slots by service class now, in one pipelined round trip."""
    if not engines:
        return {}
    pipe = client().pipeline(transaction=False)
    for engine in engines:
        pipe.hgetall(load_key(engine))
    return {e: class_slots_of(raw) for e, raw in zip(engines, pipe.execute(), strict=True)}


def demand_key(pool: str) -> str:
    return f"{_PREFIX}:demand:{pool}"


class Demand(NamedTuple):
    """One request in a pool's demand history."""

    at: float
    name: str  # the served name of its version
    missed: bool  # it started a cold load
    follow_up: bool  # a later turn of a conversation (gateway/conversations.py)


def demand_entry(
    at: float, served_name: str, *, missed: bool = False, follow_up: bool = False
) -> str:
    """How a request is kept in a pool's history: its time, its version and its marks: ' cold'
    when it started a cold load (gold protection steers by cold loads per class:
    workers.engine_view pool_policy; requests that only waited on that load are not marked),
    ' follow' when it is a later turn of a conversation (the demand tracker counts a
    conversation once: workers/cache_policy/sessions.py)."""
    return f"{at:.3f} {served_name}{' cold' if missed else ''}{' follow' if follow_up else ''}"


def demand_record(
    pool: str,
    served_name: str,
    at: float | None = None,
    *,
    missed: bool = False,
    follow_up: bool = False,
) -> None:
    """One request for `served_name` in `pool` (the gateway records its own in bulk)."""
    when = at if at is not None else time.time()
    entry = demand_entry(when, served_name, missed=missed, follow_up=follow_up)
    pipe = client().pipeline()
    pipe.lpush(demand_key(pool), entry)
    pipe.ltrim(demand_key(pool), 0, DEMAND_HISTORY_MAX - 1)
    pipe.incr(demand_key(pool) + ":n")
    pipe.execute()


def demand_since(pool: str, seen: int) -> tuple[int, list[Demand] | None]:
    """(requests recorded so far, the ones after `seen` oldest first); None: too many to
    replay, start again from `demand_history`."""
    total = int(client().get(demand_key(pool) + ":n") or 0)
    new = total - seen
    if new < 0 or new > DEMAND_HISTORY_MAX:
        return total, None
    if new == 0:
        return total, []
    return total, parse_demand(client().lrange(demand_key(pool), 0, new - 1))


def demand_history(pool: str) -> list[Demand]:
    """Recent requests of the pool, oldest first."""
    return parse_demand(client().lrange(demand_key(pool), 0, -1))


def parse_demand(raw_newest_first: Sequence[bytes | str]) -> list[Demand]:
    """A pool's history as Redis keeps it (newest first) -> oldest first; bad entries skipped."""
    out: list[Demand] = []
    for raw in reversed(raw_newest_first):
        at, _, rest = _text(raw).partition(" ")
        name, *marks = rest.split(" ")
        try:
            out.append(Demand(float(at), name, "cold" in marks, "follow" in marks))
        except ValueError:
            continue
    return out


def engine_lock(engine: str, *, lease_s: float, wait_s: float) -> redis.lock.Lock:
    """The lock one controller holds while it drives an engine; its lease frees a dead holder's."""
    return client().lock(
        f"{_PREFIX}:lock:{engine}", timeout=lease_s, blocking_timeout=wait_s, thread_local=False
    )


def _load_key(engine: str, served_name: str) -> str:
    return f"{_PREFIX}:loading:{engine}:{served_name}"


def load_claim(engine: str, served_name: str, *, ttl_s: float) -> bool:
    """True for the first caller asking for this load; the others wait for its outcome."""
    return bool(client().set(_load_key(engine, served_name), "pending", nx=True, ex=int(ttl_s) + 1))


def load_outcome(engine: str, served_name: str) -> str | None:
    """'pending', 'ok', 'error:<code>:<reason>', or None (no load claimed or its claim expired)."""
    raw = client().get(_load_key(engine, served_name))
    return _text(raw) if raw is not None else None


def load_finish(engine: str, served_name: str, outcome: str, *, keep_s: float = 2.0) -> None:
    """Publish the outcome so waiters see it, then let the claim expire shortly: waiters poll
    every 50 ms, and a later miss (the version evicted since) must be able to load again."""
    client().set(_load_key(engine, served_name), outcome, ex=max(1, int(keep_s)))


def load_failed(engine: str, served_name: str, code: str, reason: str) -> None:
    """Publish a refusal with its code; kept one second only, so a caller that retries (a slot
    may free up) soon claims a new load instead of reading this one again."""
    load_finish(engine, served_name, f"error:{code}:{reason}"[:500], keep_s=1.0)


def load_error(outcome: str) -> tuple[str, str]:
    """(code, reason) of an 'error:<code>:<reason>' outcome."""
    code, _, reason = outcome.removeprefix("error:").partition(":")
    return code, reason


def watch_claim(engine: str, *, every_s: float) -> bool:
    """True when no follow-up probe of this (down or unreachable) engine is pending yet: one
    watch per engine, however many passes (ticks, releases, misses) found it away."""
    key = f"{_PREFIX}:watch:{engine}"
    # Expires just before the follow-up runs, so that the follow-up can claim the next one.
    return bool(client().set(key, "1", nx=True, px=max(1, int(every_s * 1000) - 100)))


BUSY_SAMPLES_MAX = 2_880  # a day of samples at the 30 s reconcile period


def _busy_key(engine: str) -> str:
    return f"{_PREFIX}:busy:{engine}"


def busy_sample(engine: str, distinct_running: int, at: float | None = None) -> None:
    """How many distinct adapters had requests running on the engine at one instant (the
    controller samples vLLM's lora_requests_info each pass; the advisor sizes --max-loras)."""
    pipe = client().pipeline()
    pipe.lpush(_busy_key(engine), f"{at if at is not None else time.time():.3f} {distinct_running}")
    pipe.ltrim(_busy_key(engine), 0, BUSY_SAMPLES_MAX - 1)
    pipe.execute()


def busy_intervals(engine: str, *, since: float) -> list[tuple[float, int]]:
    """(seconds, distinct adapters running) per interval between samples, oldest first."""
    samples: list[tuple[float, int]] = []
    for raw in reversed(client().lrange(_busy_key(engine), 0, -1)):
        at, _, count = _text(raw).partition(" ")
        try:
            samples.append((float(at), int(count)))
        except ValueError:
            continue
    samples = [s for s in samples if s[0] >= since]
    return [(later[0] - earlier[0], earlier[1]) for earlier, later in itertools.pairwise(samples)]
