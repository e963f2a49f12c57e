"""The gateway through the official `openai` client, unchanged, against real engines: names a
tenant may call, streaming and not, chat and completions, and every refusal OpenAI-shaped."""

from __future__ import annotations

import openai
import pytest

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from adapters.services.lifecycle import version_disable
from tenants.services.tokens import token_issue
from tests.workers.fleet import servable_version

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
PROMPT = [{"role": "user", "content": "Say something about tea."}]


@pytest.fixture
def acme(worker_fleet, gateway_server, tmp_path):
    world = worker_fleet.world
    v1 = servable_version(world.support, tmp_path, seed=201)
    v2 = servable_version(world.support, tmp_path, seed=202)
    alias_set(
        access=AccessContext.for_user(world.users["alice"]),
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["inference"], tenant=world.acme
    )
    client = openai.OpenAI(base_url=gateway_server + "/v1", api_key=token.plaintext, max_retries=0)
    return world, client, v1, v2, gateway_server


def chat(client, model: str, **kw) -> str:
    reply = client.chat.completions.create(
        model=model, messages=PROMPT, max_tokens=12, temperature=0, **kw
    )
    return reply.choices[0].message.content


def test_models_lists_the_tenants_names_and_the_base_model(acme):
    _, client, *_ = acme
    ids = {m.id for m in client.models.list()}
    assert {"support", "support@1", "support@2", "support-bot", "tiny-llama"} <= ids
    assert not any(i.startswith("legal") for i in ids)


def test_chat_and_completions_streaming_and_not_through_every_kind_of_name(acme):
    world, client, v1, v2, _ = acme
    base = chat(client, "tiny-llama")
    through_alias = chat(client, "support-bot")
    assert through_alias != base  # the adapter changes the greedy reply
    assert chat(client, "support@1") == through_alias  # the alias points at @1
    assert chat(client, "support") == chat(client, "support@2")  # the newest active version

    pieces = []
    stream = client.chat.completions.create(
        model="support-bot",
        messages=PROMPT,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    assert "".join(pieces) == through_alias
    assert usage is not None and usage.completion_tokens > 0

    # Without include_usage the caller gets no usage chunk (the gateway still counts tokens).
    plain = client.chat.completions.create(
        model="support-bot", messages=PROMPT, max_tokens=4, temperature=0, stream=True
    )
    assert all(chunk.usage is None for chunk in plain)

    completion = client.completions.create(model="support@1", prompt="Tea is", max_tokens=6)
    assert completion.choices[0].text
    streamed = client.completions.create(
        model="support@1", prompt="Tea is", max_tokens=6, stream=True, temperature=0
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices)


def test_what_a_caller_may_not_reach(acme):
    world, client, v1, _, base_url = acme
    charlie = token_issue(
        access=AccessContext.for_user(world.users["charlie"]),
        scopes=["inference"],
        tenant=world.globex,
    )
    other = openai.OpenAI(base_url=base_url + "/v1", api_key=charlie.plaintext, max_retries=0)
    for name in ("support", "support-bot", "acme/support", "support@1", "nonexistent"):
        with pytest.raises(openai.NotFoundError) as err:
            chat(other, name)
        assert isinstance(err.value.body, dict) and err.value.body["code"] == "model_not_found"

    no_scope = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["read"], tenant=world.acme
    )
    reader = openai.OpenAI(base_url=base_url + "/v1", api_key=no_scope.plaintext, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        chat(reader, "support")
    anonymous = openai.OpenAI(base_url=base_url + "/v1", api_key="lp_nope_nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        chat(anonymous, "support")

    version_disable(
        version=v1, access=AccessContext.for_user(world.users["alice"]), reason="bad replies"
    )
    with pytest.raises(openai.NotFoundError):
        chat(client, "support@1")


def test_over_the_rate_limit_is_429_with_retry_after(acme):
    world, client, *_ = acme
    world.acme.quota_requests_per_minute = 2
    world.acme.save()
    client.models.list()  # the table is rebuilt with the new limit on the next request
    import time

    time.sleep(0.3)
    codes = []
    for _ in range(4):
        try:
            chat(client, "tiny-llama")
            codes.append(200)
        except openai.RateLimitError as err:
            codes.append(429)
            assert int(err.response.headers["retry-after"]) >= 1
    assert codes[:2] == [200, 200] and 429 in codes[2:]
