"""Fixtures of the fleet tests: the two real engines as Engine rows, emptied before each test."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from tests.fixtures.engines import EngineHandle, portal_engine_keys
from tests.fixtures.shared_counts import forget_demand, forget_engine
from tests.workers.fleet import engine_row
from workers.models import Engine


async def _empty(handle: EngineHandle) -> None:
    """Evict whatever earlier tests left on the engine, so each test starts from nothing."""
    async with handle.client() as client:
        report = await client.residency()
        for entry in report.get("registered", []):
            await client.evict(entry["name"])
        for lora_id in (await client.residency()).get("orphaned_ids", []):
            await client.evict(lora_int_id=lora_id)


@dataclass
class Fleet:
    world: Any
    a: Engine
    b: Engine
    handle_a: EngineHandle
    handle_b: EngineHandle

    def handle(self, engine: Engine) -> EngineHandle:
        return self.handle_a if engine.pk == self.a.pk else self.handle_b


def _fleet(world, engines, settings) -> Fleet:
    settings.PORTAL_ENGINE_KEYS = portal_engine_keys()
    for handle in engines:
        if not handle.is_running():
            handle.start()
        asyncio.run(_empty(handle))
    a = engine_row(engines[0], world.base)
    b = engine_row(engines[1], world.base)
    for engine in (a, b):
        forget_engine(engine.name)  # the engines were just emptied: no pins, nothing in flight
    forget_demand(["shared"])
    world.acme.quota_pinned_slots = 10
    world.acme.save()
    return Fleet(world, a, b, engines[0], engines[1])


@pytest.fixture
def fleet(world, engines, settings) -> Fleet:
    """Both engines as rows (in-process controller tests: call converge_engine directly)."""
    return _fleet(world, engines, settings)


@pytest.fixture
def worker_fleet(transactional_db, world, engines, settings, celery_worker_process) -> Fleet:
    """Both engines as rows, with the real Celery worker driving them (committed data)."""
    settings.ADAPTER_STORAGE_ROOT = str(celery_worker_process["storage_root"])
    return _fleet(world, engines, settings)
