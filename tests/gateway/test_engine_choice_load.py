"""Engine choice weighs what runs on an engine by sequences, not requests (issue 19): a tenant's
request with n=4 on one engine sends the next base-model request to the other engine, where one
single-sequence request runs (counted as requests, the two tie and the first by name wins)."""

from __future__ import annotations

import asyncio

from gateway.app import Gateway
from gateway.routes import EngineInfo, Route, RouteTable
from tests.gateway.inprocess import gw_fixture  # noqa: F401 - fixture


def _engine(name: str) -> EngineInfo:
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


async def test_the_engine_running_fewer_sequences_is_chosen(gw: Gateway):
    table = RouteTable(engines=(_engine("a"), _engine("b")), pools={7: "shared"})
    route = Route(name="tiny-llama", base_model_id=1)
    hold = asyncio.Event()

    async def running(engine: str, tenant: int, weight: int) -> None:
        async with gw.fair.slot(engine, 8, tenant, weight):
            await hold.wait()

    tasks = [
        asyncio.create_task(running("a", 1, 4)),  # one request of n=4 on a
        asyncio.create_task(running("b", 2, 1)),  # one single-sequence request on b
    ]
    await asyncio.sleep(0)
    chosen, where = gw.choose(table, route, None, set(), 7)
    assert (chosen.name, where) == ("b", "base")
    hold.set()
    await asyncio.gather(*tasks)
