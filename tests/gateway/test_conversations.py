"""Follow-up turns (gateway/conversations.py): told from first turns by the messages they
continue, recorded as such in the pool's demand history, scoped to tenant and version."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from gateway.conversations import NO_TURN, Turn, follow_ups, turn_of
from tests.fixtures.shared_counts import forget_demand
from tests.gateway.recording import measure, record, version
from workers import shared_state

pytestmark = pytest.mark.django_db

SYSTEM = {"role": "system", "content": "You answer briefly."}


def ask(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def reply(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def conversation(tag: str) -> list[list[dict[str, str]]]:
    """The messages of three turns of one chat, as a client sends them."""
    first = [SYSTEM, ask(f"{tag}: what is LoRA?")]
    second = [*first, reply("Low-rank adapters."), ask("And QLoRA?")]
    third = [*second, reply("Quantized base, LoRA on top."), ask("Thanks")]
    return [first, second, third]


def resolve(turns: list[Turn]) -> list[bool]:
    async def run() -> list[bool]:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        try:
            return await follow_ups(client, turns)
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_a_later_turn_continues_the_key_of_the_turn_before():
    first, second, third = (turn_of(m, 7, "acme--support--v1-0") for m in conversation("a"))
    assert first.continues == ""
    assert second.continues == first.key
    assert third.continues == second.key
    assert len({first.key, second.key, third.key}) == 3


def test_keys_are_scoped_to_the_tenant_and_the_version():
    messages = conversation("b")[1]
    here = turn_of(messages, 7, "acme--support--v1-0")
    assert here != turn_of(messages, 8, "acme--support--v1-0")
    assert here != turn_of(messages, 7, "acme--support--v2-0")
    assert here.key not in str(messages)  # a keyed hash, not the text


@pytest.mark.parametrize(
    "messages",
    [None, [], "hello", [reply("Hi! How can I help?"), ask("Hello")]],
    ids=["none", "empty", "not-a-list", "primed-by-a-reply"],
)
def test_nothing_to_continue_is_a_first_turn(messages):
    assert turn_of(messages, 7, "acme--support--v1-0").continues == ""
    if not isinstance(messages, list) or not messages:
        assert turn_of(messages, 7, "acme--support--v1-0") == NO_TURN


def test_follow_ups_are_seen_within_one_batch_and_across_batches():
    tag = uuid.uuid4().hex
    first, second, third = (turn_of(m, 7, "acme--support--v1-0") for m in conversation(tag))
    assert resolve([first, second]) == [False, True]
    assert resolve([third]) == [True]
    # A second caller asking the same first question starts a conversation of its own.
    assert resolve([first]) == [False]
    # The same history sent to another version is a first turn there.
    elsewhere = turn_of(conversation(tag)[1], 7, "acme--support--v2-0")
    assert resolve([elsewhere]) == [False]


def test_the_recorder_marks_later_turns_in_the_pool_history(world):
    s1 = version(world.support, 1)
    pool = f"p-{uuid.uuid4().hex[:6]}"
    now = time.time()
    turns = [turn_of(m, s1.tenant_id, s1.served_name) for m in conversation(uuid.uuid4().hex)]
    first, second, third = (
        dataclasses.replace(measure(s1, at=now + i), pool=pool, turn=t) for i, t in enumerate(turns)
    )
    # The first turn led a load: it is in the history already (workers.desired.request_load),
    # but the next turn still continues it.
    leader = dataclasses.replace(first, caused_load=True)
    try:
        record(leader, second)
        record(third)
        history = shared_state.demand_history(pool)
        assert [(d.name, d.follow_up) for d in history] == [(s1.served_name, True)] * 2
    finally:
        forget_demand([pool])
