"""/healthz stays cheap under a flood of anonymous probes: they share one recent check (no Celery
ping and engine probe per hit), while operators behind auth get a fresh, detailed check."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from portal import health
from portal.asgi import application
from workers.models import Engine

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def counted_checks(monkeypatch, settings):
    """Counts the real checks; Celery's ping answers empty at once (no worker here)."""
    settings.HEALTHZ_CACHE_SECONDS = 60
    health.forget_cached_report()
    monkeypatch.setattr(health.celery_app.control, "ping", lambda timeout: [])
    calls: list[int] = []
    real = health.health_report

    async def counting():
        calls.append(1)
        return await real()

    monkeypatch.setattr(health, "health_report", counting)
    monkeypatch.setattr("portal.views.health_report", counting)
    yield calls
    health.forget_cached_report()


async def test_a_flood_of_anonymous_probes_costs_one_check(world, counted_checks):
    await Engine.objects.acreate(
        name="gone",
        base_model=world.base,
        url="http://127.0.0.1:9/",
        served_model_name="tiny-llama",
        adapter_root="/srv/adapters",
    )
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        answers = await asyncio.gather(*(client.get("/healthz") for _ in range(50)))
        answers.append(await client.get("/healthz"))
    assert {a.status_code for a in answers} == {503}
    assert all(
        a.json()["engines"] == [{"name": "gone", "ok": False, "required": True}] for a in answers
    )
    assert len(counted_checks) == 1


def test_operators_get_a_fresh_check_every_time(world, counted_checks):
    client = world.client("olga")
    for _ in range(3):
        body = client.get("/healthz").json()
        assert body["celery"]["error"] == "no worker answered a ping"
    assert len(counted_checks) == 3
