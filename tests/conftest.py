"""Shared fixtures: the personas, and the real services (engines, S3, a Celery worker) as plugins."""

from __future__ import annotations

import warnings
from concurrent.futures import TimeoutError as FutureTimeout

import pytest
from asgiref.sync import SyncToAsync

pytest_plugins = [
    "tests.fixtures.engines",
    "tests.fixtures.s3",
    "tests.fixtures.celery_worker",
    "tests.fixtures.gateway",
    "tests.fixtures.timing",
    "tests.fixtures.fast_flush",
    "tests.fixtures.database_sessions",
    "tests.fixtures.oidc_provider",
    "tests.fixtures.notifications",
    "tests.fixtures.otlp_receiver",
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


@pytest.fixture(autouse=True)
def close_the_shared_threads_connections():
    """An async test's `sync_to_async` calls run on asgiref's one shared thread (a pytest-asyncio
    loop has no outer sync thread), and a connection opened there outlived the test: nothing
    closes it as Django does at a request's end. The full runs of 2026-12-04 kept one such connection
    checked out of the pool from the first async test to the end, and PostgreSQL then refused
    to drop the test database. Closed after every test, as Django closes a request's."""
    from django.db import connections

    yield
    try:
        SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=10)
    except FutureTimeout:
        warnings.warn("asgiref's shared thread is still busy after the test", stacklevel=1)


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
