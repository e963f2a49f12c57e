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
- the gateway's admission script (gateway.limits) reads the set itself (`ADMIT_FUNCTION`);
- every converge pass sets it to what the engine reports pinned (`pins_observed`): an engine
  restart forgets pins, a Redis restart loses the set.
So the gateway's view is never less strict than the engine's. The gateway imports this module
(workers never import the gateway).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, cast

from redis.exceptions import RedisError

from workers.fleet_redis import client

if TYPE_CHECKING:
    import redis

_PREFIX = "lp:fleet"


def inflight_key(engine: str) -> str:
    """Hash: served name -> requests in flight (or queued) on `engine` (gateway.limits counts)."""
    return f"{_PREFIX}:inflight:{engine}"


def pinned_key(engine: str) -> str:
    """Sorted set: served names pinned on `engine` -> when the pin was placed (unix time)."""
    return f"{_PREFIX}:pinned:{engine}"


# Lua shared by the scripts below and gateway.limits. `inflight`: the in-flight hash; `pinned`:
# the pinned set.
_DISTINCT_UNPINNED = """
local function distinct_unpinned(inflight, pinned, except)
  local fields = redis.call('HGETALL', inflight)
  local distinct = 0
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name ~= except and tonumber(fields[i + 1]) > 0
        and not redis.call('ZSCORE', pinned, name) then
      distinct = distinct + 1
    end
  end
  return distinct
end
"""

# admit(inflight, pinned, name, max_loras): count one more request for `name` on the engine,
# unless it would be one distinct unpinned version too many (false, nothing counted).
ADMIT_FUNCTION = (
    _DISTINCT_UNPINNED
    + """
local function admit(inflight, pinned, name, max_loras)
  local current = tonumber(redis.call('HGET', inflight, name) or '0')
  local pins = redis.call('ZCARD', pinned)
  if current > 0 or pins == 0 or redis.call('ZSCORE', pinned, name) then
    redis.call('HINCRBY', inflight, name, 1)
    return true
  end
  if distinct_unpinned(inflight, pinned, name) < math.max(1, max_loras - pins) then
    redis.call('HINCRBY', inflight, name, 1)
    return true
  end
  return false
end
"""
)

# KEYS: in-flight hash, pinned set. ARGV: served name, max_loras, now.
# 1: the name is in the set (added now, or already there); 0: no room (nothing written).
# Room: the distinct unpinned versions in flight, other than the one being pinned, must fit in
# the unpinned slots left after this pin: <= max_loras - (pins + 1).
_PIN_CLAIM = (
    _DISTINCT_UNPINNED
    + """
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 1 end
local room = tonumber(ARGV[2]) - (redis.call('ZCARD', KEYS[2]) + 1)
if distinct_unpinned(KEYS[1], KEYS[2], ARGV[1]) > room then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
"""
)

# KEYS: pinned set. ARGV: now, the names the engine reports pinned... Names no longer pinned go;
# names missing come in with `now` (a pin of unknown age counts as new: held from now on).
_PINS_OBSERVED = """
local keep = {}
for i = 2, #ARGV do keep[ARGV[i]] = true end
for _, name in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if not keep[name] then redis.call('ZREM', KEYS[1], name) end
end
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[i]) end
return 0
"""

# KEYS: in-flight hash, pinned set. ARGV: served name, max_loras. 1 counted, 0 no room.
_ENTER = (
    ADMIT_FUNCTION
    + "\nif admit(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])) then return 1 end\nreturn 0\n"
)

PinClaim = Literal["ok", "no_room", "unavailable"]


def _redis() -> redis.Redis:
    return client()


def pin_claim(engine: str, served_name: str, *, max_loras: int) -> PinClaim:
    """Before the engine pins `served_name`: put it in the engine's pinned set if the requests
    in flight there leave room ('ok'); 'no_room' (nothing written) if not; 'unavailable' when
    Redis does not answer (then the pin must not be made: the gateway could not see it)."""
    try:
        added = _redis().eval(
            _PIN_CLAIM,
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
        _redis().eval(_PINS_OBSERVED, 1, pinned_key(engine), time.time(), *sorted(pinned))
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
        _ENTER, 2, inflight_key(engine), pinned_key(engine), served_name, max_loras
    )
    return int(cast(int, entered)) == 1


def slot_leave(engine: str, served_name: str) -> None:
    key = inflight_key(engine)
    left = _redis().hincrby(key, served_name, -1)
    if left <= 0:
        _redis().hdel(key, served_name)
