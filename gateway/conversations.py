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

# A conversation idle this long starts anew: its next turn counts as demand again.
CONVERSATION_TTL_S = 1800
_PREFIX = "lp:conv:"


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
    is left for the next ones (one round trip for the batch)."""
    if not any(t.key or t.continues for t in turns):
        return [False] * len(turns)
    pipe = redis.pipeline(transaction=False)
    for t in turns:
        if t.continues:
            pipe.exists(_PREFIX + t.continues)
        if t.key:
            pipe.set(_PREFIX + t.key, 1, ex=CONVERSATION_TTL_S)
    replies = iter(await pipe.execute())
    out = []
    for t in turns:
        seen = bool(next(replies)) if t.continues else False
        if t.key:
            next(replies)
        out.append(seen)
    return out
