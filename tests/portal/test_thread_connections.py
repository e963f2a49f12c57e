"""A thread that ends holding a database connection gives it back after the test (the suite's
fixture in tests.fixtures.database_sessions), or PostgreSQL could not drop the test database."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection

from tenants.models import Tenant
from tests.faults.record import wait_until
from tests.fixtures.database_sessions import (
    BACKENDS_EXIT_WAIT_S,
    close_connections_of_ended_threads,
)


def _backend_alive(pid: int) -> bool:
    params = connection.get_connection_params()
    params.pop("options", None)
    with psycopg.connect(**params, autocommit=True) as own:
        row = own.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND state IS NOT NULL", [pid]
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.django_db(transaction=True)
def test_a_connection_left_by_an_ended_thread_is_closed():
    from django.db import connection as thread_connection

    taken: list[int] = []

    def query_and_end() -> None:
        Tenant.objects.count()
        taken.append(thread_connection.connection.info.backend_pid)

    thread = threading.Thread(target=query_and_end)
    thread.start()
    thread.join()
    assert taken and _backend_alive(taken[0])  # the thread ended without closing it

    assert close_connections_of_ended_threads() >= 1
    # Back in the pool: no longer checked out by the ended thread, so closing the pool ends it
    # (its backend exits a moment after the client closes: waited for, as DROP DATABASE does).
    if hasattr(connection, "close_pool"):
        connection.close_pool()
    wait_until(
        lambda: not _backend_alive(taken[0]),
        timeout=BACKENDS_EXIT_WAIT_S,
        what="the pooled connection's backend ends",
    )


@pytest.mark.django_db(transaction=True)
def test_the_end_of_run_report_names_a_session_still_open_and_not_one_just_closed():
    from tests.fixtures.database_sessions import other_sessions

    params = connection.get_connection_params()
    params.pop("options", None)
    held = psycopg.connect(**params, autocommit=True)
    pid = held.info.backend_pid
    try:
        report = other_sessions()
        assert any(line.startswith(f"backend {pid} ") for line in report), report
    finally:
        held.close()
    # Closed a moment ago: its backend may still be exiting; the report waits for it, as
    # DROP DATABASE does, rather than name it.
    assert not any(line.startswith(f"backend {pid} ") for line in other_sessions())
