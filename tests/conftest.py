"""Shared fixtures: the personas, and the real services (engines, S3, a Celery worker) as plugins."""

from __future__ import annotations

import warnings

import pytest

pytest_plugins = [
    "tests.fixtures.engines",
    "tests.fixtures.s3",
    "tests.fixtures.celery_worker",
    "tests.fixtures.gateway",
    "tests.fixtures.timing",
]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database; at the end of the run, any other session still on it is
    reported by its process (tests.fixtures.database_sessions), since PostgreSQL will not drop a
    database in use and pytest-django then only warns."""
    yield
    from tests.fixtures.database_sessions import other_sessions

    with django_db_blocker.unblock():
        lingering = other_sessions()
    if lingering:
        warnings.warn(
            "still on the test database at the end of the run:\n" + "\n".join(lingering),
            stacklevel=1,
        )


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
