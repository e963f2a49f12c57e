"""Release samples on the gateway (gateway.release_samples): the bounded buffer drops, never
waits, when full; its send reaches the Redis list the scoring worker pops, trimmed to the newest;
and only a planned alias's live requests are sampled, at the plan's share."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from gateway.app import Gateway
from gateway.release_samples import ReleaseSamples
from workers.redis_contract import keys
from workers.redis_contract.keys import RELEASE_SAMPLES, RELEASE_SAMPLES_COUNTS


@pytest.fixture
async def redis():
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    await client.delete(RELEASE_SAMPLES, RELEASE_SAMPLES_COUNTS)
    yield client
    await client.delete(RELEASE_SAMPLES, RELEASE_SAMPLES_COUNTS)
    await client.aclose()


async def _counts(redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in (await redis.hgetall(RELEASE_SAMPLES_COUNTS)).items()}


async def test_a_full_buffer_drops_and_a_send_reaches_the_list(redis):
    samples = ReleaseSamples(redis, capacity=2)
    assert samples.offer(alias_id=7, version_id=3, at=1.5, body=b'{"choices": []}')
    assert samples.offer(alias_id=7, version_id=4, at=1.6, body=b"data: x\n\n")
    assert not samples.offer(alias_id=7, version_id=4, at=1.7, body=b"late")
    assert samples.dropped == 1
    assert await samples.flush() == 2
    assert await samples.flush() == 0
    sent = [json.loads(x) for x in await redis.lrange(RELEASE_SAMPLES, 0, -1)]
    assert [(s["alias_id"], s["version_id"], s["body"]) for s in sent] == [
        (7, 3, '{"choices": []}'),
        (7, 4, "data: x\n\n"),
    ]
    assert await _counts(redis) == {"sent": 2, "dropped": 1}


async def test_a_refused_send_is_counted_dropped_at_the_next_one(redis):
    """Redis down for one send: its batch is dropped, and the count of it reaches Redis with
    the next send, even one with nothing to push."""
    broken = aioredis.Redis.from_url("redis://127.0.0.1:1/0")  # nothing listens: refused
    samples = ReleaseSamples(broken, capacity=10)
    samples.offer(alias_id=1, version_id=1, at=0, body=b"x")
    samples.offer(alias_id=1, version_id=1, at=0, body=b"y")
    with pytest.raises(Exception, match="(?i)connect"):
        await samples.flush()
    await broken.aclose()
    assert (samples.dropped, samples.sent) == (2, 0)
    samples.redis = redis
    assert await samples.flush() == 0
    assert await redis.llen(RELEASE_SAMPLES) == 0
    assert await _counts(redis) == {"dropped": 2}
    assert await samples.flush() == 0  # counted once
    samples.offer(alias_id=1, version_id=1, at=0, body=b"z")
    assert await samples.flush() == 1
    assert await _counts(redis) == {"dropped": 2, "sent": 1}


async def test_the_list_keeps_the_newest_under_a_backlog(redis, monkeypatch):
    monkeypatch.setattr("gateway.release_samples.RELEASE_SAMPLES_MAX", 3)
    samples = ReleaseSamples(redis, capacity=10)
    for i in range(5):
        samples.offer(alias_id=1, version_id=i, at=0, body=b"x")
    await samples.flush()
    kept = [json.loads(x)["version_id"] for x in await redis.lrange(RELEASE_SAMPLES, 0, -1)]
    assert kept == [2, 3, 4]
    assert keys.RELEASE_SAMPLES_MAX == 10_000


def _request(share: float, *, background: bool = False, target: object = True, version: int = 1):
    return SimpleNamespace(
        route=SimpleNamespace(sample_share=share, alias_id=7),
        background=background,
        target=SimpleNamespace(version_id=version) if target else None,
    )


def test_only_a_planned_aliass_live_requests_are_sampled_at_its_share():
    sample_bytes = Gateway.sample_bytes
    gw = SimpleNamespace(sample_credit={})
    assert sample_bytes(gw, _request(0.0)) == 0  # type: ignore[arg-type]
    assert sample_bytes(gw, _request(1.0, background=True)) == 0  # type: ignore[arg-type]
    assert sample_bytes(gw, _request(1.0, target=False)) == 0  # type: ignore[arg-type]
    assert sample_bytes(gw, _request(1.0)) == settings.GATEWAY_RELEASE_SAMPLE_MAX_BYTES  # type: ignore[arg-type]


def test_each_versions_replies_are_sampled_at_exactly_the_share():
    """Systematic, not a coin per reply: any run of replies of one version keeps its share to
    within one sample, whatever the other version's traffic in between."""
    sample_bytes = Gateway.sample_bytes
    gw = SimpleNamespace(sample_credit={})
    kept = {1: 0, 2: 0}
    for i in range(2000):
        version = 1 if i % 3 else 2  # the stable two replies in three, the canary one
        kept[version] += bool(sample_bytes(gw, _request(0.1, version=version)))  # type: ignore[arg-type]
    assert kept[1] in (133, 134) and kept[2] in (66, 67)  # 1334 and 666 replies at 10 %
    for _ in range(600):
        kept[1] += bool(sample_bytes(gw, _request(0.1, version=1)))  # type: ignore[arg-type]
    assert kept[1] in (193, 194)


async def test_a_kept_sample_carries_the_callers_token_id_never_its_secret(redis):
    """A shadow pair asked of the sample counts against the caller's token's budgets too
    (evals.services.shadow_pairs): the sample says which token, by its id."""
    gw = SimpleNamespace(samples=ReleaseSamples(redis, capacity=4))
    request = SimpleNamespace(
        route=SimpleNamespace(alias_id=7),
        payload={"messages": [{"role": "user", "content": "Tea?"}], "max_tokens": 5},
        token_id=42,
    )
    keep_sample: Any = Gateway.keep_sample  # called with stand-ins for the gateway's objects
    keep_sample(gw, request, SimpleNamespace(version_id=3), b"{}")
    keep_sample(
        gw,
        SimpleNamespace(**{**vars(request), "token_id": None}),
        SimpleNamespace(version_id=3),
        b"{}",
    )
    await gw.samples.flush()
    sent = [json.loads(x) for x in await redis.lrange(RELEASE_SAMPLES, 0, -1)]
    assert [s["token_id"] for s in sent] == [42, None]
    assert sent[0]["params"] == {"max_tokens": 5}
