"""One request schema at the edge: wrong types, unknown fields and requests
beyond the tenant's plan are refused with 400 in OpenAI's error format, naming the field, before
any engine is chosen; everything the official `openai` client sends passes.

Through the gateway's ASGI app with no engine up: a request that passes ends at
`engine_unavailable` (503)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.gateway.inprocess import PROMPT, code_of, gw_fixture, post, token_for  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
CHAT = {"model": "tiny-llama", "messages": PROMPT}
COMPLETION = {"model": "tiny-llama", "prompt": "hi"}
# A tool whose definition alone is past the test plan's 1000 bytes of prompt.
BIG_TOOL = {
    "type": "function",
    "function": {"name": "lookup", "description": "x" * 1001, "parameters": {"type": "object"}},
}
BIG_CALL = {
    "id": "call-1",
    "type": "function",
    "function": {"name": "lookup", "arguments": '{"q": "' + "x" * 1001 + '"}'},
}


@pytest.fixture
def token(world):
    world.acme.max_n = 4
    world.acme.max_prompts = 3
    world.acme.max_tokens = 100
    world.acme.max_logprobs = 5
    world.acme.max_prompt_logprobs = 2
    world.acme.max_prompt_bytes = 1000
    world.acme.max_structured_output_bytes = 200
    world.acme.save()
    return token_for(world.users["alice"], world.acme)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"stream": "false"}, "stream"),  # read as a stream by one side, not by the other
        ({"stream": 1}, "stream"),
        ({"stream_options": "yes"}, "stream_options"),  # was an AttributeError: a 500
        ({"stream_options": {"include_usage": "true"}}, "stream_options"),
        ({"n": "2"}, "n"),
        ({"n": 0}, "n"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"messages": "hi"}, "messages"),
        ({"messages": []}, "messages"),
        ({"temperature": "hot"}, "temperature"),
        ({"cache_salt": "another-tenants-salt"}, "cache_salt"),  # the gateway sets it
        ({"priority": -100}, "priority"),  # steers the engine's scheduler
        ({"kv_transfer_params": {}}, "kv_transfer_params"),
        ({"no_such_field": 1}, "no_such_field"),
    ],
)
async def test_a_chat_request_of_the_wrong_shape_is_a_400_naming_the_field(gw, token, extra, param):
    reply = await post(gw, token, {**CHAT, **extra})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == param
    assert error["type"] == "invalid_request_error" and param in error["message"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"prompt": 5}, "prompt"),
        ({"best_of": "3"}, "best_of"),
        ({"logprobs": True}, "logprobs"),
        ({"echo": "no"}, "echo"),
    ],
)
async def test_a_completion_of_the_wrong_shape_is_a_400_naming_the_field(gw, token, extra, param):
    reply = await post(gw, token, {**COMPLETION, **extra}, path="/v1/completions")
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == param and code_of(reply) == "invalid_request"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {**CHAT, "n": 5}, "n"),
        ("/v1/completions", {**COMPLETION, "best_of": 5}, "n"),
        ("/v1/completions", {**COMPLETION, "prompt": ["a", "b", "c", "d"]}, "prompt"),
        ("/v1/completions", {**COMPLETION, "prompt": [[1, 2]] * 4}, "prompt"),
        ("/v1/chat/completions", {**CHAT, "max_tokens": 101}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 101}, "max_completion_tokens"),
        ("/v1/chat/completions", {**CHAT, "min_tokens": 101}, "min_tokens"),
        ("/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 6}, "top_logprobs"),
        ("/v1/completions", {**COMPLETION, "logprobs": 6}, "logprobs"),
        ("/v1/completions", {**COMPLETION, "prompt_logprobs": 3}, "prompt_logprobs"),
        ("/v1/completions", {**COMPLETION, "prompt": "x" * 1001}, "prompt"),
        (
            "/v1/chat/completions",
            {**CHAT, "messages": [{"role": "user", "content": "x" * 1001}]},
            "prompt",
        ),
        # Everything the model is given counts toward the prompt's size, not only message text.
        ("/v1/completions", {**COMPLETION, "suffix": "x" * 1001}, "prompt"),
        ("/v1/chat/completions", {**CHAT, "tools": [BIG_TOOL]}, "prompt"),
        ("/v1/chat/completions", {**CHAT, "functions": [BIG_TOOL["function"]]}, "prompt"),
        (
            "/v1/chat/completions",
            {
                **CHAT,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "x" * 1001}]}],
            },
            "prompt",
        ),
        (
            "/v1/chat/completions",
            {**CHAT, "messages": [*PROMPT, {"role": "assistant", "tool_calls": [BIG_CALL]}]},
            "prompt",
        ),
        (
            "/v1/chat/completions",
            {**CHAT, "structured_outputs": {"regex": "a" * 300}},
            "structured_outputs",
        ),
        (
            "/v1/chat/completions",
            {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"d": "x" * 300}}},
            "response_format",
        ),
    ],
)
async def test_a_request_beyond_the_tenants_plan_is_a_400_naming_the_bound(
    gw, token, path, body, param
):
    reply = await post(gw, token, body, path=path)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "over_plan_limit" and error["param"] == param


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {**CHAT, "n": 4, "max_tokens": 100, "min_tokens": 100}),
        ("/v1/completions", {**COMPLETION, "prompt": ["a", "b", "c"], "best_of": 4, "n": 2}),
        ("/v1/completions", {**COMPLETION, "prompt": [1, 2, 3] * 50, "logprobs": 5}),
        ("/v1/chat/completions", {**CHAT, "stream": False, "stream_options": None}),
        (
            "/v1/chat/completions",
            {**CHAT, "stream": True, "stream_options": {"include_usage": True}},
        ),
    ],
)
async def test_requests_within_the_plan_pass_to_the_engine_choice(gw, token, path, body):
    reply = await post(gw, token, body, path=path)
    assert (reply.status_code, code_of(reply)) == (503, "engine_unavailable")


async def test_what_the_official_client_sends_passes(gw, token):
    """Every chat and completions parameter the `openai` client takes, as it sends them."""
    client = openai.AsyncOpenAI(
        base_url="http://gw/v1",
        api_key=token,
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=gw)),  # type: ignore[arg-type]
    )
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    chat_kwargs: dict[str, Any] = dict(
        model="tiny-llama",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
        frequency_penalty=0.1,
        presence_penalty=0.1,
        logit_bias={"5": 1.0},
        logprobs=True,
        top_logprobs=2,
        max_tokens=10,
        max_completion_tokens=10,
        n=2,
        seed=1,
        stop=["\n"],
        temperature=0.5,
        top_p=0.9,
        user="u-1",
        tools=[tool],
        tool_choice="auto",
        parallel_tool_calls=False,
        response_format={"type": "json_object"},
        metadata={"k": "v"},
        store=False,
        service_tier="auto",
        reasoning_effort="low",
        prompt_cache_key="k",
        safety_identifier="s",
        verbosity="low",
        modalities=["text"],
        extra_body={"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1, "min_tokens": 1},
    )
    with pytest.raises(openai.InternalServerError) as chat_refusal:
        await client.chat.completions.create(**chat_kwargs)
    with pytest.raises(openai.InternalServerError) as stream_refusal:
        await client.chat.completions.create(
            **chat_kwargs, stream=True, stream_options={"include_usage": True}
        )
    with pytest.raises(openai.InternalServerError) as completion_refusal:
        await client.completions.create(
            model="tiny-llama",
            prompt=["a", "b"],
            best_of=2,
            echo=False,
            frequency_penalty=0.0,
            logit_bias={"5": 1},
            logprobs=2,
            max_tokens=5,
            n=2,
            presence_penalty=0.0,
            seed=3,
            stop="\n",
            suffix=None,
            temperature=0.2,
            top_p=1.0,
            user="u-2",
            extra_body={"ignore_eos": True, "prompt_logprobs": 1},
        )
    for refusal in (chat_refusal, stream_refusal, completion_refusal):
        assert refusal.value.status_code == 503
        assert refusal.value.body["code"] == "engine_unavailable"  # type: ignore[index]
