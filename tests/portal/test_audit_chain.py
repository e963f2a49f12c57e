import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError

from core.audit import record_event
from core.audit_models import AuditEvent
from portal.audit_verify import verify_chain

pytestmark = pytest.mark.django_db


def _events(n):
    return [
        record_event(action="test.event", object_type="thing", object_id=str(i), after={"i": i})
        for i in range(n)
    ]


def test_it_verifies_an_untouched_chain():
    _events(5)
    report = verify_chain()
    assert report.ok, report
    assert report.checked == 5


def test_it_links_each_event_to_the_previous_hash():
    events = _events(3)
    assert events[1].prev_hash == events[0].hash
    assert events[2].prev_hash == events[1].hash


def test_it_names_the_tampered_row():
    events = _events(4)
    with connection.cursor() as cursor:
        # As the database owner: bypass the append-only triggers, as an attacker with DBA rights would.
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(
            "UPDATE portal_auditevent SET after = %s WHERE id = %s", ['{"i": 99}', events[2].pk]
        )
        cursor.execute("SET session_replication_role = origin")
    report = verify_chain()
    assert not report.ok
    assert report.first_broken_id == events[2].pk
    assert "changed" in report.reason


def test_it_detects_a_removed_row():
    events = _events(4)
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("DELETE FROM portal_auditevent WHERE id = %s", [events[1].pk])
        cursor.execute("SET session_replication_role = origin")
    report = verify_chain()
    assert not report.ok
    assert report.first_broken_id == events[2].pk


def test_it_detects_a_removed_newest_row():
    events = _events(3)
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("DELETE FROM portal_auditevent WHERE id = %s", [events[2].pk])
        cursor.execute("SET session_replication_role = origin")
    report = verify_chain()
    assert not report.ok
    assert report.first_broken_id == events[2].pk


@pytest.mark.parametrize(
    "statement", ["UPDATE portal_auditevent SET action = 'x'", "DELETE FROM portal_auditevent"]
)
def test_the_triggers_refuse_changes_on_postgresql(statement):
    _events(1)
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement)
    assert AuditEvent.objects.count() == 1


def test_the_trigger_refuses_truncate_outside_maintenance():
    _events(1)
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET LOCAL lora_portal.audit_maintenance = 'off'")
        cursor.execute("TRUNCATE portal_auditevent")
