"""Which chat requests continue a conversation, so the demand tracker counts a conversation once
rather than once per turn (workers/cache_policy/sessions.py).

A chat client sends the whole conversation every turn: a later turn's messages are an earlier
request's messages, the reply to it and the new question. Each chat request leaves a key of its
messages in Redis, and a request whose messages before its last assistant reply have a key is a
follow-up. Keys are scoped to the tenant and the version and hashed with a secret: no text is
kept, and a key means nothing without the secret. Plain completions carry no history: they are
first turns. The keys are resolved when the recorder flushes, off the request's path.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings
from redis import asyncio as aioredis

from workers.redis_contract import scripts as lua

# A conversation idle this long starts anew: its next turn counts as demand again.
CONVERSATION_TTL_S = 1800
_PREFIX = "lp:conv:"
BATCH = 500  # turns per script call: a flush's batch never holds Redis for long at once
# conversation_turns.lua's letter for a turn: (it continues a key, it has a key of its own)
_CODES = {(False, False): "n", (True, False): "c", (False, True): "k", (True, True): "b"}


@dataclass(frozen=True, slots=True)
class Turn:
    key: str  # this request's messages
    continues: str  # the messages it continues ("" for a first turn)


NO_TURN = Turn("", "")


def turn_of(messages: Any, tenant_id: int, served_name: str) -> Turn:
    """The keys of a chat request's messages (as the client sent them)."""
    if not isinstance(messages, list) or not messages:
        return NO_TURN
    replies = [
        i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"
    ]
    last_reply = replies[-1] if replies else 0
    return Turn(
        key=_key(tenant_id, served_name, messages),
        # A reply at the very start continues nothing a caller asked here (a primed prompt).
        continues=_key(tenant_id, served_name, messages[:last_reply]) if last_reply else "",
    )


@functools.cache
def _secret() -> bytes:
    return hashlib.blake2b(settings.SECRET_KEY.encode(), person=b"lp-conversation").digest()


def _key(tenant_id: int, served_name: str, messages: list[Any]) -> str:
    try:
        raw = orjson.dumps([tenant_id, served_name, messages], option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not plain JSON: no key, the request counts as a first turn
        return ""
    return hashlib.blake2b(raw, key=_secret(), digest_size=16).hexdigest()


async def follow_ups(redis: aioredis.Redis, turns: list[Turn]) -> list[bool]:
    """For each turn, in order: whether the messages it continues were seen; each turn's own key
    is left for the next ones (conversation_turns.lua: one script call per BATCH turns, where a
    pipeline of a command per key cost the gateway a command object each)."""
    if not any(t.key or t.continues for t in turns):
        return [False] * len(turns)
    script = redis.register_script(lua.CONVERSATION_TURNS)
    out: list[bool] = []
    for start in range(0, len(turns), BATCH):
        keys: list[str] = []
        codes = []
        for t in turns[start : start + BATCH]:
            if t.continues:
                keys.append(_PREFIX + t.continues)
            if t.key:
                keys.append(_PREFIX + t.key)
            codes.append(_CODES[bool(t.continues), bool(t.key)])
        seen = await script(keys=keys, args=[CONVERSATION_TTL_S, "".join(codes)])
        out += [bool(s) for s in seen]
    return out
