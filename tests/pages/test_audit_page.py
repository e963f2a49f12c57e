"""The audit log page: scope by role, filters, pages, and the chain check."""

from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from core.audit import record_event
from core.audit_models import AuditEvent

pytestmark = pytest.mark.django_db
URL = reverse("audit")


def _events(response):
    return list(response.context["page"].object_list)


def test_a_platform_admin_sees_every_tenant(pages):
    events = _events(pages.client("adam").get(URL))
    assert {"acme", "globex"} <= {e.tenant_label for e in events}


def test_an_owner_sees_only_their_tenants(pages):
    response = pages.client("alice").get(URL)
    assert {e.tenant_label for e in _events(response)} == {"acme"}
    assert pages.client("alice").get(URL, {"tenant": "globex"}).status_code == 404


def test_filters_narrow_the_list(pages):
    client = pages.client("adam")
    assert {e.tenant_label for e in _events(client.get(URL, {"tenant": "globex"}))} == {"globex"}
    assert {e.actor_label for e in _events(client.get(URL, {"actor": "rita"}))} == {"rita"}
    assert all(
        e.action.startswith("version.") for e in _events(client.get(URL, {"action": "version."}))
    )
    by_object = _events(client.get(URL, {"object": "acme/support@1"}))
    assert by_object and all(e.object_id.startswith("acme/support@1") for e in by_object)
    today = timezone.localdate()
    assert _events(client.get(URL, {"since": str(today), "until": str(today)}))
    assert _events(client.get(URL, {"until": str(today - timedelta(days=1))})) == []
    assert _events(client.get(URL, {"since": str(today + timedelta(days=1))})) == []


def test_a_bad_date_is_refused(pages):
    response = pages.client("adam").get(URL, {"since": "yesterday"})
    assert response.status_code == 400
    assert b"audit.bad_date" in response.content


def test_it_pages_and_keeps_the_filters(pages):
    for i in range(60):
        record_event(action="test.filler", tenant=pages.world.globex, object_id=str(i))
    client = pages.client("adam")
    first = client.get(URL, {"action": "test."})
    assert len(_events(first)) == 50 and first.context["page"].has_next()
    assert "action=test.&amp;page=2" in first.content.decode()
    second = client.get(URL, {"action": "test.", "page": "2"})
    assert len(_events(second)) == 10
    assert {e.pk for e in _events(first)}.isdisjoint({e.pk for e in _events(second)})


def test_verify_reports_an_intact_chain(pages):
    response = pages.client("adam").get(reverse("audit-verify"), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert b"Chain intact" in response.content
    assert f"{AuditEvent.objects.count()} events checked".encode() in response.content


def test_verify_names_a_tampered_row(pages):
    victim = AuditEvent.objects.order_by("id")[2]
    with connection.cursor() as cursor:
        cursor.execute(
            "SET session_replication_role = replica"
        )  # as the DB owner, past the triggers
        cursor.execute(
            "UPDATE portal_auditevent SET after = %s WHERE id = %s", ['{"x": 1}', victim.pk]
        )
        cursor.execute("SET session_replication_role = origin")
    response = pages.client("adam").get(reverse("audit-verify"))
    assert f"Chain broken at event #{victim.pk}".encode() in response.content


def test_only_platform_admins_see_the_verify_button(pages):
    assert b"Verify chain" in pages.client("adam").get(URL).content
    assert b"Verify chain" not in pages.client("alice").get(URL).content
