"""The gateway's ASGI app driven in process (httpx's ASGI transport): the whole request path up
to the choice of an engine, on the test database and Redis, with no engine started. A request
that resolves and passes the schema ends at `engine_unavailable` (503) when no engine is up."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from adapters.access import AccessContext
from gateway.app import Gateway
from gateway.routes import EngineInfo
from tenants.services.tokens import token_issue

PROMPT = [{"role": "user", "content": "hi"}]


@pytest.fixture(name="gw")
async def gw_fixture(transactional_db, settings) -> AsyncIterator[Gateway]:
    """A Gateway of the test's own (its tables, Redis client and engine sessions)."""
    settings.GATEWAY_REFRESH_SECONDS = 0  # tables follow every change at once
    app = Gateway()
    yield app
    await app.aclose()  # its lease loop too: left to the event loop's close, one hung the suite


def token_for(user, tenant=None, scopes=("inference",)) -> str:
    issued = token_issue(access=AccessContext.for_user(user), scopes=list(scopes), tenant=tenant)
    return issued.plaintext


async def post(app: Gateway, token: str, body: dict, path: str = "/v1/chat/completions"):
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # an ASGI callable
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.post(path, json=body, headers={"authorization": f"Bearer {token}"})


async def get(app: Gateway, token: str, path: str):
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # an ASGI callable
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.get(path, headers={"authorization": f"Bearer {token}"})


def code_of(response: httpx.Response) -> str:
    return response.json()["error"]["code"]


def tiny_engine_info(name: str) -> EngineInfo:
    """A tiny-model engine in the shared pool as the gateway's tables hold it (nothing listens
    at its address: for engine choice, which sends nothing)."""
    return EngineInfo(
        name=name,
        url=f"http://127.0.0.1:1/{name}",
        key=None,
        pool="shared",
        base_model_id=1,
        served_model_name="tiny-llama",
        max_lora_rank=32,
        max_loras=2,
        max_cpu_loras=2,
        capacity=8,
    )
