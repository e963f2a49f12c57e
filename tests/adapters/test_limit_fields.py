"""Limits a tenant cannot lift: max_concurrent_requests is at least 1 (0 once
meant "no cap") and at most the plan's; every plan bound is at least 1; each is checked where it
is set (the API and the pages, through the same services), refused with a code, nothing saved."""

from __future__ import annotations

import pytest
from django.urls import reverse

from adapters.models import Adapter
from tenants.models import Tenant
from tenants.plan import REQUEST_BOUNDS

pytestmark = pytest.mark.django_db

SUPPORT = "/api/v1/tenants/acme/adapters/support/"
ACME = "/api/v1/tenants/acme/"
PLAN_FIELDS = ["max_adapter_concurrency", *REQUEST_BOUNDS]


@pytest.mark.parametrize("value", [0, -1])
def test_the_api_refuses_an_adapter_concurrency_below_one(world, value):
    reply = world.client("bob").patch(SUPPORT, {"max_concurrent_requests": value}, format="json")
    assert reply.status_code == 400 and "max_concurrent_requests" in reply.content.decode()
    assert Adapter.objects.get(pk=world.support.pk).max_concurrent_requests == 16


def test_the_api_refuses_a_new_adapter_with_no_concurrency(world):
    reply = world.client("bob").post(
        "/api/v1/tenants/acme/adapters/",
        {"name": "nocap", "base_model": world.base.name, "max_concurrent_requests": 0},
        format="json",
    )
    assert reply.status_code == 400 and not Adapter.objects.filter(name="nocap").exists()


def test_the_adapter_page_refuses_a_concurrency_below_one(world):

    page = reverse("adapter-update", args=["acme", "support"])
    reply = world.client("bob").post(page, {"max_concurrent_requests": "0"})
    assert reply.status_code == 400 and b"max_concurrent_requests" in reply.content
    assert Adapter.objects.get(pk=world.support.pk).max_concurrent_requests == 16


@pytest.mark.parametrize("field", PLAN_FIELDS)
def test_the_api_refuses_a_plan_bound_below_one(world, field):
    before = getattr(world.acme, field)
    reply = world.client("adam").patch(ACME, {field: 0}, format="json")
    assert reply.status_code == 400 and field in reply.content.decode()
    assert getattr(Tenant.objects.get(pk=world.acme.pk), field) == before
    assert world.client("adam").patch(ACME, {field: 3}, format="json").status_code == 200


@pytest.mark.parametrize("field", ["max_in_flight_requests", "max_n"])
def test_the_tenant_page_refuses_a_plan_bound_below_one(world, field):
    page = reverse("platform-tenant", args=["acme"])
    before = getattr(world.acme, field)
    reply = world.client("adam").post(page, {field: "0"})
    assert reply.status_code == 400 and field.encode() in reply.content
    assert getattr(Tenant.objects.get(pk=world.acme.pk), field) == before


def test_a_tenant_cannot_set_its_own_plan_bounds(world):
    reply = world.client("alice").patch(ACME, {"max_n": 1000}, format="json")
    assert reply.status_code in (403, 400)
    assert Tenant.objects.get(pk=world.acme.pk).max_n == world.acme.max_n


def test_new_tenants_start_with_the_platform_defaults(world, settings):
    settings.GATEWAY_PLAN_DEFAULTS = {**settings.GATEWAY_PLAN_DEFAULTS, "max_n": 3}
    assert Tenant.objects.create(slug="fresh", name="Fresh").max_n == 3
