"""The gateway answers 400 in OpenAI's format to a body nested too deep, never an exception: a
tool definition, a response format or structured outputs nested 255 levels passed the schema
and then raised in orjson.dumps (the prompt-size bound measures them with it, and the body is
sent on with it). And the playground's socket reads a message nested 100,000 deep as no message
(it was a RecursionError that killed the socket)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from gateway.app import MAX_BODY_DEPTH
from tests.gateway.inprocess import PROMPT, gw_fixture, token_for  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
CHAT = {"model": "tiny-llama", "messages": PROMPT}


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def deep_bodies(depth: int) -> dict[str, dict[str, Any]]:
    """Chat bodies whose deepest point is `depth` + a few levels, through each free-form field."""
    return {
        "tools": {
            **CHAT,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": nested(depth)}}],
        },
        "response_format": {
            **CHAT,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": nested(depth)},
            },
        },
        "structured_outputs": {**CHAT, "structured_outputs": {"json": nested(depth)}},
    }


@pytest.fixture
def token(world):
    return token_for(world.users["alice"], world.acme)


async def post_raw(app, token: str, body: bytes):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.post(
            "/v1/chat/completions",
            content=body,
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        )


async def test_a_body_nested_too_deep_is_a_400_through_every_free_form_field(gw, token):
    for field, body in deep_bodies(300).items():
        reply = await post_raw(gw, token, json.dumps(body).encode())
        assert reply.status_code == 400, (field, reply.text[:200])
        error = reply.json()["error"]
        assert error["code"] == "invalid_json" and error["type"] == "invalid_request_error"
        assert f"deeper than {MAX_BODY_DEPTH} levels" in error["message"]
    for raw in (b"[" * 100_000 + b"]" * 100_000, b"[null, null]"):
        reply = await post_raw(gw, token, raw)
        assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_json"


async def test_a_body_within_the_bound_reaches_engine_choice(gw, token):
    for field, body in deep_bodies(MAX_BODY_DEPTH - 8).items():
        reply = await post_raw(gw, token, json.dumps(body).encode())
        # No engine is up: a request that passed every check ends at engine choice.
        assert reply.json()["error"]["code"] == "engine_unavailable", (field, reply.text[:200])


async def test_the_playground_reads_a_message_nested_too_deep_as_no_message():
    from gateway.consumers import PlaygroundConsumer

    assert await PlaygroundConsumer.decode_json("[" * 100_000 + "]" * 100_000) is None
    assert await PlaygroundConsumer.decode_json("{nope") is None
    assert await PlaygroundConsumer.decode_json('{"prompt": "hi"}') == {"prompt": "hi"}
