"""The transactional tests' clean-up (tests/fixtures/fast_flush.py) leaves what Django's flush
left: every table empty but the content types, permissions and migration log. The first test
fills tables (the audit log's append-only table among them); the second, run after it on the same
worker, finds them empty."""

from __future__ import annotations

import pytest
from django.db import connection

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
