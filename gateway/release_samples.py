"""Live answers sampled for release plans' live checks, handed off after the reply is delivered.

The request path only appends to a bounded in-process buffer (a sample that finds it full is
dropped and counted, never waited for); the replica's flush loop sends the buffer to a Redis
list (workers.redis_contract.keys.RELEASE_SAMPLES), trimmed so a backlog keeps the newest; a
worker scores them there (evals.services.live_samples). Each send also adds what it sent and
what was dropped since the last one to RELEASE_SAMPLES_COUNTS (the same round trip). Which
aliases are sampled, and at what share, comes from the route tables (Route.sample_share): no
row is read per request.
"""

from __future__ import annotations

import logging
from collections import deque

import orjson
from redis import asyncio as aioredis

from workers.redis_contract.keys import (
    RELEASE_SAMPLES,
    RELEASE_SAMPLES_COUNTS,
    RELEASE_SAMPLES_MAX,
)

log = logging.getLogger(__name__)

# What a release plan's shadow pair asks the candidate with besides the prompt: the stable's own
# sampling terms (evals.services.shadow_pairs), so both answers are to the same request.
SHADOW_PARAMS = (
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
)


class ReleaseSamples:
    def __init__(self, redis: aioredis.Redis, capacity: int) -> None:
        self.redis = redis
        self.capacity = capacity
        self._held: deque[bytes] = deque()
        self.dropped = 0  # samples that found the buffer full (tests and logs read it)
        self.sent = 0
        self._dropped_counted = 0  # of `dropped`, what RELEASE_SAMPLES_COUNTS has

    def offer(
        self,
        *,
        alias_id: int,
        version_id: int,
        at: float,
        body: bytes,
        prompt: object = None,
        params: dict[str, object] | None = None,
        token_id: int | None = None,
    ) -> bool:
        """Keep one answer for the next send; False (dropped) when the buffer is full.
        `token_id`: the caller's API token (its id, never the secret), whose budgets a shadow
        pair asked of the request is counted against too."""
        if len(self._held) >= self.capacity:
            self.dropped += 1
            return False
        self._held.append(
            orjson.dumps(
                {
                    "alias_id": alias_id,
                    "version_id": version_id,
                    "at": at,
                    "body": body.decode("utf-8", "replace"),
                    # The request's messages (or prompt): written down only for a plan that
                    # keeps text (evals.services.live_samples).
                    "prompt": prompt,
                    "params": params or {},
                    "token_id": token_id,
                }
            )
        )
        return True

    async def flush(self) -> int:
        """Send what is held; what Redis refused is dropped (they are a sample)."""
        dropped = self.dropped - self._dropped_counted
        if not self._held and not dropped:
            return 0
        batch = list(self._held)
        self._held.clear()
        try:
            pipe = self.redis.pipeline(transaction=False)
            if batch:
                pipe.rpush(RELEASE_SAMPLES, *batch)
                pipe.ltrim(RELEASE_SAMPLES, -RELEASE_SAMPLES_MAX, -1)
                pipe.hincrby(RELEASE_SAMPLES_COUNTS, "sent", len(batch))
            if dropped:
                pipe.hincrby(RELEASE_SAMPLES_COUNTS, "dropped", dropped)
            await pipe.execute()
        except Exception:
            self.dropped += len(batch)
            raise
        self._dropped_counted += dropped
        self.sent += len(batch)
        return len(batch)
