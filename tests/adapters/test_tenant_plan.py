"""Tenants cannot raise their own priority (docs/security.md, class 8): SLO class, pool and the
plan (warm slots, pin slots, per-adapter concurrency) are a platform admin's; a tenant's own
settings stay within the plan, refused with a code otherwise, and every change is audited."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.models import Adapter, AdapterVersion
from core.audit_models import AuditEvent
from gateway.routes import build_table
from tenants.models import Tenant
from workers.models import Engine

pytestmark = pytest.mark.django_db

SUPPORT = "/api/v1/tenants/acme/adapters/support/"
ACME = "/api/v1/tenants/acme/"


@pytest.fixture
def engines(world) -> list[Engine]:
    """Two roomy engines in the shared pool, so only the plan can refuse a warm policy."""
    return [
        Engine.objects.create(
            name=name,
            base_model=world.base,
            pool="shared",
            url=f"http://{name}.invalid:8000",
            served_model_name="tiny",
            max_loras=4,
            max_cpu_loras=16,
            adapter_root="/srv/adapters",
        )
        for name in ("e1", "e2")
    ]


@pytest.fixture
def patch(world, django_capture_on_commit_callbacks):
    def run(who: Any, url: str, body: dict[str, Any]) -> Any:
        client = world.client(who) if isinstance(who, str) else who
        with django_capture_on_commit_callbacks(execute=True):
            return client.patch(url, body, format="json")

    return run


def audited(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action))


@pytest.mark.parametrize(
    "body",
    [
        {"slo_class": "gold"},
        {"pool": "dedicated"},
        {"quota_pinned_slots": 8},
        {"quota_warm_slots": 8},
        {"max_adapter_concurrency": 1000},
        {"quota_requests_per_minute": 100000},
    ],
)
@pytest.mark.parametrize("who", ["alice", "alice-admin-token"])
def test_an_owner_cannot_change_the_tenants_plan(world, patch, body, who):
    client = world.token_client("alice", ["admin"]) if who == "alice-admin-token" else who
    before = Tenant.objects.filter(slug="acme").values().get()
    response = patch(client, ACME, body)
    assert response.status_code == 403, response.json()
    assert response.json()["error"]["code"] == "permission.denied"
    assert Tenant.objects.filter(slug="acme").values().get() == before
    assert not audited("tenant.update")


def test_it_refuses_an_adapter_concurrency_above_the_plan(world, patch):
    limit = world.acme.max_adapter_concurrency
    response = patch("bob", SUPPORT, {"max_concurrent_requests": limit + 1})
    assert response.status_code == 409, response.json()
    error = response.json()["error"]
    assert error["code"] == "plan.adapter_concurrency"
    assert "max_adapter_concurrency" in error["message"] and "platform admin" in error["message"]
    assert error["details"]["limit"] == limit
    assert Adapter.objects.get(pk=world.support.pk).max_concurrent_requests == 16
    assert not audited("adapter.update")
    assert patch("bob", SUPPORT, {"max_concurrent_requests": limit}).status_code == 200


def test_it_refuses_to_create_an_adapter_above_the_plan(world):
    response = world.client("bob").post(
        "/api/v1/tenants/acme/adapters/",
        {"name": "greedy", "base_model": world.base.name, "max_concurrent_requests": 100000},
        format="json",
    )
    assert response.status_code == 409, response.json()
    assert response.json()["error"]["code"] == "plan.adapter_concurrency"
    assert not Adapter.objects.filter(name="greedy").exists()
    assert not audited("adapter.create")


def test_a_platform_admin_raises_the_plan_and_the_tenant_may_use_it(world, patch):
    response = patch("adam", ACME, {"max_adapter_concurrency": 200, "quota_warm_slots": 5})
    assert response.status_code == 200, response.json()
    assert (response.json()["max_adapter_concurrency"], response.json()["quota_warm_slots"]) == (
        200,
        5,
    )
    (event,) = audited("tenant.update")
    assert event.actor_label == "adam"
    assert event.before == {"max_adapter_concurrency": 64, "quota_warm_slots": 2}
    assert event.after == {"max_adapter_concurrency": 200, "quota_warm_slots": 5}
    assert patch("bob", SUPPORT, {"max_concurrent_requests": 200}).status_code == 200


def test_a_lowered_plan_binds_adapters_that_asked_for_more(world, patch):
    assert patch("bob", SUPPORT, {"max_concurrent_requests": 64}).status_code == 200
    AdapterVersion.objects.create(
        tenant=world.acme,
        adapter=world.support,
        number=1,
        status="active",
        served_name="acme--support--v1-00000001",
        rank=8,
    )
    assert patch("adam", ACME, {"max_adapter_concurrency": 8}).status_code == 200
    # The gateway's admission reads its route table: the tenant's plan caps the adapter's own.
    route = build_table(0).routes[world.acme.pk]["support"]
    assert route.targets[0].max_concurrent == 8


def _warm_adapter(world, name: str) -> Adapter:
    return Adapter.objects.create(
        tenant=world.acme, name=name, base_model=world.base, warmup_policy="always_warm"
    )


def test_it_refuses_a_warm_policy_beyond_the_tenants_warm_slots(world, engines, patch):
    _warm_adapter(world, "billing")
    _warm_adapter(world, "sales")
    response = patch("bob", SUPPORT, {"warmup_policy": "always_warm"})
    assert response.status_code == 409, response.json()
    error = response.json()["error"]
    assert error["code"] == "schedule.warm_quota"
    assert "quota_warm_slots" in error["message"] and "acme/billing" in error["message"]
    assert Adapter.objects.get(pk=world.support.pk).warmup_policy == "on_demand"
    assert not audited("adapter.update")
    world.acme.quota_warm_slots = 3
    world.acme.save()
    assert patch("bob", SUPPORT, {"warmup_policy": "always_warm"}).status_code == 200


def test_business_hours_preloads_count_as_warm(world, engines, patch):
    world.acme.quota_warm_slots = 1
    world.acme.save()
    _warm_adapter(world, "billing")
    response = patch(
        "bob",
        SUPPORT,
        {
            "warmup_policy": "preload_on_business_hours",
            "warmup_start": "09:00",
            "warmup_end": "17:00",
        },
    )
    assert response.status_code == 409, response.json()
    assert response.json()["error"]["code"] == "schedule.warm_quota"
