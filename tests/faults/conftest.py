"""The fault suite's fixtures: the fleet tests' (both real engines as rows, the real worker),
and a Redis server of the test's own (`own_redis`), to stall, kill and restart."""

import pytest

from tests.faults.redis_server import OwnRedis
from tests.workers.conftest import fleet, worker_fleet  # noqa: F401 - fixtures, used by name


@pytest.fixture
def own_redis(tmp_path):
    server = OwnRedis(tmp_path / "redis")
    server.start()
    yield server
    server.stop()
