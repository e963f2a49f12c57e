"""The playground on real engines, through the portal's own uvicorn (Django, Channels and the
gateway in one process, as deployed): a maintainer's staged version and the base model side by
side, token frames one after another, loaded by the fleet and measured like API traffic."""

from __future__ import annotations

import asyncio
import json
import time

import openai
import pytest
from websockets.asyncio.client import connect

from adapters.access import AccessContext
from engine.sample_adapters import TINY_BASE_MODEL_NAME
from tenants.services.tokens import token_issue
from tests.gateway.recording import gw_redis  # noqa: F401 - fixture
from tests.portal.test_tenant_events_socket import session_cookie
from tests.workers.fleet import residency_report, servable_version
from workers import shared_state

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


def socket_url(base: str, tenant: str = "acme") -> str:
    return base.replace("http://", "ws://") + f"/ws/tenants/{tenant}/playground/"


def browser_headers(base: str, user) -> dict[str, str]:
    """A signed-in browser's cookie, from the portal's own origin."""
    headers = {k.decode(): v.decode() for k, v in session_cookie(user)}
    return {**headers, "origin": base}


async def chat(base: str, headers: dict[str, str], message: dict) -> list[tuple[float, dict]]:
    """Every frame of one prompt's replies, with when it arrived, until each pane ended."""
    frames: list[tuple[float, dict]] = []
    async with connect(socket_url(base), additional_headers=headers) as socket:
        await socket.send(json.dumps(message))
        ended = 0
        while ended < len(message["models"]):
            frame = json.loads(await asyncio.wait_for(socket.recv(), timeout=180))
            frames.append((time.perf_counter(), frame))
            ended += frame["type"] in ("done", "error")
    return frames


def pane(frames: list[tuple[float, dict]], index: int, kind: str) -> list[dict]:
    return [f for _, f in frames if f.get("pane") == index and f["type"] == kind]


def test_a_maintainer_streams_a_staged_version_beside_the_base_model(
    worker_fleet,
    gateway_server,
    tmp_path,
    gw_redis,  # noqa: F811 - fixture
):
    world = worker_fleet.world
    staged = servable_version(world.support, tmp_path, seed=501, status="staged")
    message = {
        "prompt": "Say something about tea.",
        "models": [f"support@{staged.number}", f"base:{TINY_BASE_MODEL_NAME}"],
        "max_tokens": 8,
        # Greedy: the same reply on every run. Sampled, the tiny random model's 8 tokens can end
        # at once or decode to empty pieces (CI once saw a pane with no token frame).
        "temperature": 0,
    }
    headers = browser_headers(gateway_server, world.users["bob"])
    frames = asyncio.run(chat(gateway_server, headers, message))

    errors = [f for _, f in frames if f["type"] == "error"]
    assert not errors, errors
    for index in (0, 1):
        tokens = pane(frames, index, "token")
        (done,) = pane(frames, index, "done")
        # Token by token: several frames, each its own websocket message.
        assert len(tokens) >= 2 and all(t["text"] for t in tokens)
        assert done["tokens"] >= len(tokens) - 1 and done["ttft_ms"] > 0
        assert done["tokens_per_s"] is not None and done["tokens_per_s"] > 0
    # The fleet loaded the staged version (the gateway's single-flight cold load).
    held = [
        residency_report(handle)["resident"]
        for handle in (worker_fleet.handle_a, worker_fleet.handle_b)
    ]
    assert any(staged.served_name in resident for resident in held)
    # Measured like API traffic (gateway.recorder's counters, flushed once a second).
    field = f"acme|support|support@{staged.number}|requests"
    counters = shared_state.client()
    for _ in range(100):
        if counters.hget("lp:gwm:counters", field):
            break
        time.sleep(0.1)
    assert int(counters.hget("lp:gwm:counters", field) or 0) == 1


def test_a_greedy_prompt_gets_the_same_reply_every_time(
    worker_fleet,
    gateway_server,
    gw_redis,  # noqa: F811 - fixture
):
    """The page's temperature reaches the engine: at 0 the same prompt gets the same reply (at
    the engine's default sampling two replies of the tiny random model differ)."""
    message = {
        "prompt": "Tell me about tea.",
        "models": [f"base:{TINY_BASE_MODEL_NAME}"],
        "max_tokens": 12,
        "temperature": 0,
    }
    headers = browser_headers(gateway_server, worker_fleet.world.users["bob"])
    replies = []
    for _ in range(2):
        frames = asyncio.run(chat(gateway_server, headers, message))
        assert not [f for _, f in frames if f["type"] == "error"]
        replies.append("".join(t["text"] for t in pane(frames, 0, "token")))
    assert replies[0] and replies[0] == replies[1], replies


def test_the_api_never_serves_a_staged_version(worker_fleet, gateway_server, tmp_path):
    world = worker_fleet.world
    staged = servable_version(world.support, tmp_path, seed=502, status="staged")
    token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["inference"], tenant=world.acme
    )
    client = openai.OpenAI(base_url=gateway_server + "/v1", api_key=token.plaintext, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model=f"support@{staged.number}",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
        )
