"""An engine's GPU-slot admission state in Redis: its requests in flight and its pins, both read
and written by Lua scripts, so the gateway's admissions and the controller's pins are atomic
with each other across every gateway replica and worker.

Why: vLLM's scheduler batches up to --max-loras distinct adapters whatever is pinned, and a batch
with more distinct unpinned adapters than unpinned GPU slots (max_loras - pins) kills vLLM 0.32's
engine core (KeyError in lora/punica_wrapper/utils.py convert_mapping). So on an engine with pins
at most max_loras - pins distinct unpinned versions may have requests there at once. The gateway
counted requests here but read the pins from its own tables, which lag the controller: under
load the controller moved a pin about once a second and killed an engine (issue 20).

Now the pin set lives here too (a sorted set: served name -> when the pin was placed):
- the controller adds a name BEFORE asking the engine to pin it, through `PIN_CLAIM`, which
  refuses while the distinct unpinned versions in flight there leave no room for one more pin;
  it removes a name only AFTER the engine unpinned (or evicted) it;
- the gateway's admission script (gateway.limits) reads the set itself (admit.lua);
- every converge pass sets it to what the engine reports pinned (`pins_observed`): an engine
  restart forgets pins, a Redis restart loses the set.
So the gateway's view is never less strict than the engine's. The keys and the scripts are the
Redis contract both sides share (workers.redis_contract).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, cast

from redis.exceptions import RedisError

from workers.fleet_redis import client
from workers.redis_contract.keys import inflight_key, pinned_key
from workers.redis_contract.scripts import PIN_CLAIM, PINS_OBSERVED, SLOT_ENTER

if TYPE_CHECKING:
    import redis

PinClaim = Literal["ok", "no_room", "unavailable"]


def _redis() -> redis.Redis:
    return client()


def pin_claim(engine: str, served_name: str, *, max_loras: int) -> PinClaim:
    """Before the engine pins `served_name`: put it in the engine's pinned set if the requests
    in flight there leave room ('ok'); 'no_room' (nothing written) if not; 'unavailable' when
    Redis does not answer (then the pin must not be made: the gateway could not see it)."""
    try:
        added = _redis().eval(
            PIN_CLAIM,
            2,
            inflight_key(engine),
            pinned_key(engine),
            served_name,
            max_loras,
            time.time(),
        )
    except RedisError:
        return "unavailable"
    return "ok" if int(cast(int, added)) == 1 else "no_room"


def pin_drop(engine: str, served_name: str) -> bool:
    """After the engine unpinned or evicted `served_name` (or refused to pin it): out of the
    set. False when Redis did not answer: the entry stays (stricter than the engine) until the
    next pass sets the set to what the engine reports."""
    try:
        _redis().zrem(pinned_key(engine), served_name)
    except RedisError:
        return False
    return True


def pins_observed(engine: str, pinned: Iterable[str]) -> bool:
    """Set the engine's pinned set to what the engine reports (a converge pass's observation);
    the placement times of pins still there are kept. False when Redis did not answer."""
    try:
        _redis().eval(PINS_OBSERVED, 1, pinned_key(engine), time.time(), *sorted(pinned))
    except RedisError:
        return False
    return True


def pinned_since(engine: str) -> dict[str, float]:
    """{served name: when its pin was placed} for the engine's pinned set."""
    raw = cast(
        list[tuple[bytes, float]], _redis().zrange(pinned_key(engine), 0, -1, withscores=True)
    )
    return {name.decode(): score for name, score in raw}


def slot_enter(engine: str, served_name: str, *, max_loras: int) -> bool:
    """Count a request the controller sends itself (a warm-up) in the engine's in-flight hash,
    as the gateway counts its own; False (nothing counted) when its version would be one
    distinct unpinned version too many. Pair with `slot_leave`."""
    entered = _redis().eval(
        SLOT_ENTER, 2, inflight_key(engine), pinned_key(engine), served_name, max_loras
    )
    return int(cast(int, entered)) == 1


def slot_leave(engine: str, served_name: str) -> None:
    key = inflight_key(engine)
    left = _redis().hincrby(key, served_name, -1)
    if left <= 0:
        _redis().hdel(key, served_name)
