"""Engine choice weighs what runs on an engine by sequences, not requests: a tenant's
request with n=4 on one engine sends the next base-model request to the other engine, where one
single-sequence request runs (counted as requests, the two tie and the first by name wins). And a
tenant's requests keep off the engine another tenant has been using lately."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.app import Gateway
from gateway.fairness import Ask
from gateway.request import GatewayRequest
from gateway.routes import Route, RouteTable
from tests.gateway.inprocess import gw_fixture  # noqa: F401 - fixture
from tests.gateway.inprocess import tiny_engine_info as _engine
from workers.cache_policy import Tier


async def _no_reply(message: dict[str, Any]) -> None:
    raise AssertionError("engine choice sends nothing")


def _request(table: RouteTable, route: Route, tenant_id: int) -> GatewayRequest:
    """A base-model request of `tenant_id`, as the gateway serves it."""
    return GatewayRequest("chat", {}, route, None, table, tenant_id, send=_no_reply, started=0.0)


async def test_the_engine_running_fewer_sequences_is_chosen(gw: Gateway):
    table = RouteTable(engines=(_engine("a"), _engine("b")), pools={7: "shared"})
    route = Route(name="tiny-llama", base_model_id=1)
    hold = asyncio.Event()

    async def running(engine: str, tenant: int, weight: int) -> None:
        async with gw.fair.slot(engine, 8, Ask(tenant, weight)):
            await hold.wait()

    tasks = [
        asyncio.create_task(running("a", 1, 4)),  # one request of n=4 on a
        asyncio.create_task(running("b", 2, 1)),  # one single-sequence request on b
    ]
    await asyncio.sleep(0)
    chosen, where = gw.choose(_request(table, route, 7))
    assert (chosen.name, where) == ("b", Tier.BASE)
    hold.set()
    await asyncio.gather(*tasks)


async def test_a_tenant_keeps_off_the_engine_its_neighbour_uses(gw: Gateway):
    """Tenant 2 has sent engine a four single-sequence requests a second for ten seconds (none
    running now); tenant 7's base-model request goes to b, though a is as idle as b. Tenant 2's
    own next request still goes to a: its own work is no neighbour's."""
    table = RouteTable(engines=(_engine("a"), _engine("b")), pools={7: "shared", 2: "shared"})
    route = Route(name="tiny-llama", base_model_id=1)
    for _ in range(40):
        async with gw.fair.slot("a", 8, Ask(2, 1)):
            pass
    assert gw.fair.others_rate("a", 7) > 1.0 and gw.fair.others_rate("a", 2) == 0.0
    assert gw.choose(_request(table, route, 7))[0].name == "b"
    assert gw.choose(_request(table, route, 2))[0].name == "a"
