"""Shared fixtures: the personas, and the real services (engines, S3, a Celery worker) as plugins."""

from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.fixtures.engines",
    "tests.fixtures.s3",
    "tests.fixtures.celery_worker",
    "tests.fixtures.gateway",
    "tests.fixtures.timing",
]


@pytest.fixture
def world(db, settings, tmp_path):
    from tests.factories import build_world

    settings.ADAPTER_STORAGE_BACKEND = "local"
    settings.ADAPTER_STORAGE_ROOT = str(tmp_path / "storage")
    return build_world()


@pytest.fixture(autouse=True)
def fresh_login_counters():
    """Failed sign-ins are counted in Redis across requests (lockout, throttle, audit windows);
    every test starts with none from the test client's address, or one test's failures would
    lock the next one out."""
    from core.login_guard import clear_login_counters

    clear_login_counters("127.0.0.1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`) every test that uses the two CPU engines runs on
    one worker: the engines are a session fixture, and a second pair would not fit the machine."""
    for item in items:
        if item.get_closest_marker("engine"):
            item.add_marker(pytest.mark.xdist_group("engines"))
