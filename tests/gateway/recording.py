"""Gateway measurements written the way the gateway writes them: the real Recorder, add() and
flush(), into the test Redis, with the gateway's keys emptied before and after each test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from adapters.models import Adapter, AdapterVersion
from gateway.recorder import Measurement, Recorder
from workers import shared_state
from workers.models import Engine

GATEWAY_KEYS = ("lp:gwm:*", "lp:usage:*")


def _clear() -> None:
    client = shared_state.client()
    for pattern in GATEWAY_KEYS:
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)


@pytest.fixture
def gw_redis() -> Iterator[None]:
    """The gateway's Redis keys, empty (another test, or a gateway run, may have left some)."""
    _clear()
    yield
    _clear()


def version(adapter: Adapter, number: int) -> AdapterVersion:
    return AdapterVersion.objects.create(
        tenant=adapter.tenant,
        adapter=adapter,
        number=number,
        status="active",
        served_name=f"{adapter.tenant.slug}--{adapter.name}--v{number}-{number:08x}",
        rank=8,
    )


def measure(
    v: AdapterVersion | None,
    *,
    at: float,
    served_from: str = "gpu",
    ok: bool = True,
    ttft: float | None = 40.0,
    e2e: float = 100.0,
    tokens_in: int = 10,
    tokens_out: int = 5,
    load: float = 0.0,
    tenant: tuple[str, int] | None = None,
    service_class: str = "",
) -> Measurement:
    """One request to version `v`, or to the base model (`v=None`, give `tenant`)."""
    if tenant is None:
        assert v is not None, "name the version, or the tenant for the base model"
        tenant = (v.tenant.slug, v.tenant_id)
    slug, tenant_id = tenant
    return Measurement(
        tenant=slug,
        tenant_id=tenant_id,
        adapter=v.adapter.name if v else "",
        version=f"{v.adapter.name}@{v.number}" if v else "tiny-llama",
        version_id=v.id if v else None,
        pool="",  # no demand entries: the controller's shared state stays untouched
        served_name=v.served_name if v else "",
        engine="cpu-1",
        served_from="base" if v is None else served_from,
        ok=ok,
        ttft_ms=ttft if ok else None,
        e2e_ms=e2e,
        prompt_tokens=tokens_in,
        completion_tokens=tokens_out,
        load_ms=load,
        at=at,
        service_class=service_class,
    )


def record(*measurements: Measurement) -> int:
    """add() each and flush() once, as one gateway replica does within a second."""

    async def run() -> int:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        try:
            recorder = Recorder(client)
            for m in measurements:
                recorder.add(m)
            return await recorder.flush()
        finally:
            await client.aclose()

    return asyncio.run(run())


def engine_row(world: Any, name: str, pool: str) -> Engine:
    """An engine row (no server behind it) for the cost view's up-time and pools."""
    return Engine.objects.create(
        name=name,
        base_model=world.base,
        pool=pool,
        url=f"http://127.0.0.1:9/{name}",
        served_model_name="tiny",
        adapter_root="/srv/adapters",
        state="up",
    )
