"""The fault suite's fixtures: the fleet tests' (both real engines as rows, the real worker),
and a Redis server of the test's own (`own_redis`), to stall, kill and restart."""

from tests.faults.redis_server import own_redis  # noqa: F401 - a fixture, used by name
from tests.workers.conftest import fleet, worker_fleet  # noqa: F401 - fixtures, used by name
