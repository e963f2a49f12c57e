"""The fault suite's fixtures: the fleet tests' (both real engines as rows, the real worker)."""

from tests.workers.conftest import worker_fleet  # noqa: F401 - a fixture, used by name
