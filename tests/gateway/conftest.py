"""The fleet fixtures (two real engines as rows, the Celery worker behind them) for gateway tests."""

from tests.workers.conftest import fleet, worker_fleet  # noqa: F401 - fixtures used here
