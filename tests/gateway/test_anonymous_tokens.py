"""Anonymous /v1/ traffic is cheap to refuse (docs/security.md, section 16).

A made-up token is refused from the gateway's tables: no database query (every cursor of every
thread is counted) and no wait on the tables' refresh lock (held by the test while the made-up
tokens are refused; `table_checks` counts who took it). A per-address limit answers 429 before the
token is looked at. Through the gateway's ASGI app, on the test database and Redis; no engine.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db.backends.utils import CursorWrapper

from gateway.app import Gateway
from tests.gateway.inprocess import PROMPT, code_of, gw_fixture, post, token_for  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
BODY = {"model": "tiny-llama", "messages": PROMPT}


def made_up() -> str:
    return f"lp_{secrets.token_hex(5)}_{secrets.token_urlsafe(32)}"


@pytest.fixture
def queries(monkeypatch) -> list[str]:
    """Every SQL statement any thread sends while the test runs (they still run)."""
    seen: list[str] = []
    execute, executemany = CursorWrapper.execute, CursorWrapper.executemany

    def counted_execute(self, sql, params=None):
        seen.append(str(sql))
        return execute(self, sql, params)

    def counted_executemany(self, sql, param_list):
        seen.append(str(sql))
        return executemany(self, sql, param_list)

    monkeypatch.setattr(CursorWrapper, "execute", counted_execute)
    monkeypatch.setattr(CursorWrapper, "executemany", counted_executemany)
    return seen


@pytest.fixture
def owner_token(world) -> str:
    return token_for(world.users["alice"], world.acme)


@pytest.fixture
async def steady(gw: Gateway, owner_token, settings) -> AsyncIterator[Gateway]:
    """The gateway as deployed: tables trusted between change messages, built once."""
    settings.GATEWAY_REFRESH_SECONDS = 60
    first = await post(gw, owner_token, BODY)
    assert first.status_code != 401, first.text
    yield gw


async def test_a_made_up_token_costs_no_query_and_no_wait_on_the_tables_lock(steady, queries):
    checks, reads = steady.table_checks, steady.routes_generation.reads
    queries.clear()
    async with steady._refresh:  # held: a refusal that needed it would never come
        replies = await asyncio.wait_for(
            asyncio.gather(*(post(steady, made_up(), BODY) for _ in range(40))), timeout=10
        )
    assert {r.status_code for r in replies} == {401}
    assert {code_of(r) for r in replies} == {"invalid_api_key"}
    assert queries == []
    assert steady.table_checks == checks
    # Forty misses at once share the Redis reads of the routes' generation.
    assert steady.routes_generation.reads - reads < 40


async def test_a_known_prefix_with_a_wrong_secret_is_refused_the_same_way(
    steady, owner_token, queries
):
    prefix = owner_token.split("_")[1]
    checks = steady.table_checks
    queries.clear()
    async with steady._refresh:
        reply = await asyncio.wait_for(
            post(steady, f"lp_{prefix}_{secrets.token_urlsafe(32)}", BODY), timeout=10
        )
    assert reply.status_code == 401
    assert queries == [] and steady.table_checks == checks


async def test_a_token_without_the_inference_scope_is_403_from_the_tables(steady, world, queries):
    reader = await sync_to_async(token_for)(world.users["alice"], world.acme, scopes=("read",))
    await post(steady, made_up(), BODY)  # the mint's change is read: the tables know it now
    queries.clear()
    reply = await post(steady, reader, BODY)
    assert reply.status_code == 403
    assert code_of(reply) == "insufficient_scope"
    assert reply.json()["error"]["type"] == "permission_error"
    assert queries == []


async def test_a_token_minted_a_moment_ago_is_served_at_once(steady, world):
    fresh = await sync_to_async(token_for)(world.users["alice"], world.acme)
    reply = await post(steady, fresh, BODY)
    assert reply.status_code != 401, reply.text


async def send_from(app: Gateway, address: str, token: str, headers: dict | None = None):
    transport = httpx.ASGITransport(app=app, client=(address, 4321))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.post(
            "/v1/chat/completions",
            json=BODY,
            headers={"authorization": f"Bearer {token}", **(headers or {})},
        )


@pytest.fixture
async def limited(transactional_db, settings) -> AsyncIterator[Gateway]:
    settings.GATEWAY_ADDRESS_RATE_PER_SECOND = 0.01  # no token comes back during the test
    settings.GATEWAY_ADDRESS_BURST = 3
    app = Gateway()
    yield app
    await app.aclose()


async def test_the_per_address_limit_answers_429_before_the_token_is_looked_at(
    limited, owner_token, queries
):
    valid = owner_token
    for _ in range(3):
        assert (await send_from(limited, "203.0.113.7", made_up())).status_code == 401
    checks, reads = limited.table_checks, limited.routes_generation.reads
    queries.clear()
    refused = await send_from(limited, "203.0.113.7", valid)
    assert refused.status_code == 429
    assert refused.json()["error"] == {
        "message": refused.json()["error"]["message"],
        "type": "rate_limit_error",
        "param": None,
        "code": "address_rate_limited",
    }
    assert int(refused.headers["retry-after"]) >= 1
    # Refused before authentication: no table, no Redis read, no query.
    assert (limited.table_checks, limited.routes_generation.reads, queries) == (checks, reads, [])
    # Another address is not held by it.
    assert (await send_from(limited, "203.0.113.8", valid)).status_code != 429


async def test_behind_a_trusted_proxy_the_limit_keys_on_the_forwarded_address(limited, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    for _ in range(3):
        reply = await send_from(limited, "10.0.0.1", made_up(), {"x-forwarded-for": "198.51.100.1"})
        assert reply.status_code == 401
    held = await send_from(limited, "10.0.0.1", made_up(), {"x-forwarded-for": "198.51.100.1"})
    other = await send_from(limited, "10.0.0.1", made_up(), {"x-forwarded-for": "198.51.100.2"})
    assert (held.status_code, other.status_code) == (429, 401)
