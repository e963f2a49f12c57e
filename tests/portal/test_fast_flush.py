"""The transactional tests' clean-up (tests/fixtures/fast_flush.py) leaves what Django's flush
left: every table empty but the content types, permissions and migration log. The first test
fills tables (the audit log's append-only table among them); the second, run after it on the same
worker, finds them empty. A row another process commits between the probe and the clean-up's
commit, pointing at a row being deleted, leaves every table empty all the same."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection
from django.test import TransactionTestCase
from django.utils import timezone

from tests.fixtures import fast_flush
from tests.fixtures.fast_flush import KEPT, tables_with_rows

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.xdist_group("fast-flush")]


def test_a_test_leaves_rows_in_many_tables(world):
    from core.audit import record_event

    record_event(action="test.fill", actor=world.users["alice"], tenant=world.acme, obj=world.acme)
    filled = set(tables_with_rows(connection))
    assert {"portal_auditevent", "auth_user", "tenants_tenant"} <= filled


def test_the_next_test_finds_them_empty():
    assert set(tables_with_rows(connection)) == set()
    with connection.cursor() as cursor:
        for table in KEPT:
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            assert cursor.fetchone()[0] > 0, table


def _dsn() -> str:
    db = connection.settings_dict
    return f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname={db['NAME']}"


def test_a_row_written_by_another_process_after_the_probe_is_cleaned_up_too(world, monkeypatch):
    """As a worker's probe of an engine does while a test ends: an up-time row for an engine the
    clean-up is about to delete, committed on a connection of its own after the tables were
    probed (the DELETE of the engines then breaks the foreign key at commit)."""
    from workers.models import Engine

    engine = Engine.objects.create(
        name="flush-race",
        base_model=world.base,
        url="http://127.0.0.1:1",
        served_model_name=world.base.name,
        adapter_root="/nonexistent",
    )
    probed = fast_flush.tables_with_rows

    def probe_then_another_process_writes(conn):
        names = probed(conn)
        assert "workers_engineuptime" not in names
        now = timezone.now()
        with psycopg.connect(_dsn(), autocommit=True) as other:
            other.execute(
                "INSERT INTO workers_engineuptime (engine_id, pool, started_at, last_seen_at,"
                " closed) VALUES (%s, 'shared', %s, %s, false)",
                (engine.pk, now, now),
            )
        return names

    monkeypatch.setattr(fast_flush, "tables_with_rows", probe_then_another_process_writes)
    fast_flush._fixture_teardown(TransactionTestCase())
    monkeypatch.undo()
    assert set(tables_with_rows(connection)) == set()
    with connection.cursor() as cursor:
        for table in KEPT:
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            assert cursor.fetchone()[0] > 0, table
