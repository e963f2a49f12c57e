"""Service classes as plans (issue 46, part 1): the defaults, a platform admin's audited edit
with bad values refused whole, and a token's class: lower than its tenant's, never higher."""

import pytest

from adapters.access import AccessContext
from core.audit_models import AuditEvent
from tenants.models import ServiceClass
from tenants.services.tokens import token_issue

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def bobs_token(world):
    return token_issue(
        access=AccessContext.for_user(world.users["bob"]), scopes=["read"], tenant=world.acme
    ).token


def test_the_default_classes_are_gold_six_silver_three_bronze_one(world):
    rows = world.client("alice").get("/api/v1/service-classes/").json()["results"]
    plans = {r["name"]: (r["weight"], r["max_queue_wait_ms"], r["sheddable"]) for r in rows}
    assert plans == {
        "gold": (6, 10000, False),
        "silver": (3, 5000, True),
        "bronze": (1, 2000, True),
    }


def test_a_platform_admin_edits_a_class_and_it_is_audited(world):
    response = world.client("adam").patch(
        "/api/v1/service-classes/silver/",
        {"weight": 4, "max_queue_wait_ms": 3000},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert ServiceClass.objects.get(name="silver").weight == 4
    event = AuditEvent.objects.get(action="service_class.update")
    assert event.before == {"weight": 3, "max_queue_wait_ms": 5000}
    assert event.after == {"weight": 4, "max_queue_wait_ms": 3000}


def test_a_zero_weight_is_refused_and_nothing_changes(world):
    response = world.client("adam").patch(
        "/api/v1/service-classes/silver/",
        {"weight": 0, "max_queue_wait_ms": 1},
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    row = ServiceClass.objects.get(name="silver")
    assert (row.weight, row.max_queue_wait_ms) == (3, 5000)
    assert not AuditEvent.objects.filter(action="service_class.update").exists()


def test_a_token_is_given_a_lower_class_than_its_tenants(world, bobs_token):
    assert world.acme.slo_class == "silver"
    client = world.client("bob")
    response = client.patch(
        f"/api/v1/tenants/acme/tokens/{bobs_token.prefix}/",
        {"service_class": "bronze"},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["service_class"] == "bronze"
    event = AuditEvent.objects.get(action="token.service_class")
    assert (event.before, event.after) == ({"service_class": ""}, {"service_class": "bronze"})


def test_a_token_is_never_given_a_higher_class_than_its_tenants(world, bobs_token):
    response = world.client("bob").patch(
        f"/api/v1/tenants/acme/tokens/{bobs_token.prefix}/",
        {"service_class": "gold"},
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "token.service_class_above_tenant"
    bobs_token.refresh_from_db()
    assert bobs_token.service_class == ""
    assert not AuditEvent.objects.filter(action="token.service_class").exists()


def test_an_unknown_class_is_refused(world, bobs_token):
    response = world.client("bob").patch(
        f"/api/v1/tenants/acme/tokens/{bobs_token.prefix}/",
        {"service_class": "platinum"},
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "token.bad_service_class"
