"""Security classes 6 and 7, as callers reach them (the matrix holds the status of every
endpoint; these hold what the bodies show and the explicit way in for platform roles).

6. A grant is only a grant: gus, granted acme/support, sees that adapter and nothing else of acme.
7. Platform roles stay out of tenants: a platform admin or a superuser acts inside a tenant only
   as a member, and becomes one explicitly (membership.set, audited).
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from adapters.access import AccessContext
from adapters.models import Adapter, AdapterVersion
from core.audit_models import AuditEvent
from tenants.services.tenancy import adapter_grant
from tests.factories import PASSWORD, make_user

pytestmark = pytest.mark.django_db

TENANT_DETAILS = {"slo_class", "quota_adapters", "quota_storage_bytes", "pool"}


@pytest.fixture
def gus(world):
    """Granted view on acme/support only; acme also has `billing`."""
    Adapter.objects.create(
        tenant=world.acme, name="billing", base_model=world.base, created_by=world.users["alice"]
    )
    user = make_user("gus")
    adapter_grant(
        access=AccessContext.for_user(world.users["alice"]),
        adapter=world.support,
        username="gus",
        perms=["view_adapter"],
    )
    world.users["gus"] = user
    return user


@pytest.fixture
def sue(world):
    user = get_user_model().objects.create_superuser("sue", password=PASSWORD)
    world.users["sue"] = user
    return user


# --- 6. a grant is only a grant ---


def test_it_shows_a_grantee_the_tenants_name_but_not_its_plan(world, gus):
    client = world.client("gus")
    detail = client.get("/api/v1/tenants/acme/")
    assert detail.status_code == 200
    assert detail.json() == {"slug": "acme", "name": "Acme Corp"}
    listed = client.get("/api/v1/tenants/").json()["results"]
    assert listed == [{"slug": "acme", "name": "Acme Corp"}]
    # A member still sees the whole row.
    assert set(world.client("vera").get("/api/v1/tenants/acme/").json()) >= TENANT_DETAILS


def test_it_does_not_let_a_grantee_learn_the_plan_through_a_filter(world, gus):
    client = world.client("gus")
    for slo in ("gold", "silver", "bronze"):
        rows = client.get("/api/v1/tenants/", {"slo_class": slo}).json()["results"]
        assert rows == [], (slo, rows)
    member = world.client("vera").get("/api/v1/tenants/", {"slo_class": "silver"}).json()
    assert [row["slug"] for row in member["results"]] == ["acme"]


def test_it_shows_a_grantee_only_the_granted_adapter_on_pages_and_api(world, gus):
    api = world.client("gus")
    names = [row["name"] for row in api.get("/api/v1/tenants/acme/adapters/").json()["results"]]
    assert names == ["support"]
    assert api.get("/api/v1/tenants/acme/adapters/billing/").status_code == 404
    page = world.client("gus").get("/t/acme/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "support" in body and "billing" not in body


def test_the_dashboard_shows_a_grantee_the_tenants_name_but_not_its_plan(world, gus):
    mine = world.client("gus").get("/").content.decode()
    assert "Acme Corp" in mine and "silver" not in mine
    assert "silver" in world.client("vera").get("/").content.decode()


def test_a_revoked_grant_leaves_nothing_of_the_tenant(world, gus):
    from tenants.services.tenancy import adapter_revoke_grants

    adapter_revoke_grants(
        access=AccessContext.for_user(world.users["alice"]), adapter=world.support, username="gus"
    )
    client = world.client("gus")
    assert client.get("/api/v1/tenants/acme/").status_code == 404
    assert client.get("/api/v1/tenants/").json()["results"] == []
    assert client.get("/t/acme/").status_code == 404


# --- 7. platform roles stay out of tenants ---


def _disable(client, number: int):
    return client.post(
        f"/api/v1/tenants/acme/adapters/support/versions/{number}/disable/",
        {"reason": "incident"},
        format="json",
    )


def _active_version(world, tmp_path) -> AdapterVersion:
    from tests.pages.builders import active, validated

    return active(world, validated(world, "bob", world.support, tmp_path))


@pytest.mark.parametrize("who", ["adam", "sue"])
def test_a_platform_admin_acts_in_a_tenant_only_after_joining_it(world, tmp_path, who, sue):
    version = _active_version(world, tmp_path)
    client = world.client(who)
    refused = _disable(client, version.number)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "disable.not_allowed"
    edit = client.patch(
        "/api/v1/tenants/acme/adapters/support/", {"description": "mine"}, format="json"
    )
    assert edit.status_code == 403, edit.json()
    version.refresh_from_db()
    assert version.status == "active"

    # The explicit way in: the platform admin makes themselves a member, and the audit says so.
    joined = client.post(
        "/api/v1/tenants/acme/members/", {"username": who, "role": "owner"}, format="json"
    )
    assert joined.status_code == 201, joined.json()
    event = AuditEvent.objects.filter(action="membership.set").latest("id")
    assert event.actor_label == who and event.tenant_label == "acme"
    assert _disable(client, version.number).status_code == 200


def test_a_superuser_holds_no_object_permission_it_was_not_granted(world, sue):
    access = AccessContext.for_user(sue)
    for perm in ("change_adapter", "upload_version", "release_version", "delete_adapter"):
        assert not access.adapter_can(world.support, perm), perm
    # Seeing is the platform admin's (every tenant is visible to it); acting is not.
    assert access.adapter_can(world.support, "view_adapter")


def test_the_access_services_ask_who_may_change_members_and_grants_themselves(world):
    """The check is inside the service (tenants.services.tenancy), whichever page or endpoint calls."""
    from core.errors import PermissionDenied
    from tenants.services.tenancy import membership_set

    for who in ("bob", "vera", "rita", "olga", "charlie"):
        access = AccessContext.for_user(world.users[who])
        with pytest.raises(PermissionDenied):
            membership_set(access=access, tenant=world.acme, username="nora", role="owner")
        with pytest.raises(PermissionDenied):
            adapter_grant(
                access=access, adapter=world.support, username="nora", perms=["view_adapter"]
            )
    assert not world.acme.memberships.filter(user__username="nora").exists()
