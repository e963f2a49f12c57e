"""The gateway tests' shared fixtures: the fleet (two real engines as rows, the Celery worker
behind them) and the admission scripts against the real Redis."""

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from gateway import limits
from tests.workers.conftest import fleet, worker_fleet  # noqa: F401 - fixtures used here


@pytest.fixture
async def scripts():
    """One replica's admission scripts (gateway.limits) on its own client of the test Redis."""
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    yield limits.Scripts(client)
    await client.aclose()
