"""The fleet fixtures (real engines as rows, the Celery worker behind them) for the live pages'
engine test."""

from tests.workers.conftest import fleet, worker_fleet  # noqa: F401 - fixtures used here
