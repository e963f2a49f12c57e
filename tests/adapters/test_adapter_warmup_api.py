"""Warm-up policies and platform fields through PATCH /api/v1/tenants/{t}/adapters/{a}/:
the window and its beat entries, the hard rules (409), and who may set pool and SLO class."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django_celery_beat.models import PeriodicTask

from adapters.models import Adapter
from core.audit_models import AuditEvent
from workers.models import Engine

pytestmark = pytest.mark.django_db

URL = "/api/v1/tenants/acme/adapters/support/"
WINDOW = {
    "warmup_policy": "preload_on_business_hours",
    "warmup_days": "mon-fri",
    "warmup_start": "09:00",
    "warmup_end": "17:30",
    "warmup_timezone": "Europe/Berlin",
}


@pytest.fixture(autouse=True)
def eager_tasks():
    """The one-shot apply runs in the test process instead of going to the broker."""
    from workers.schedules import apply_warmup_window

    conf = apply_warmup_window.app.conf
    before, conf.task_always_eager = conf.task_always_eager, True
    yield
    conf.task_always_eager = before


@pytest.fixture
def engines(world) -> list[Engine]:
    return [
        Engine.objects.create(
            name=name,
            base_model=world.base,
            pool=pool,
            url=f"http://{name}.invalid:8000",
            served_model_name="tiny",
            max_loras=4,
            max_cpu_loras=8,
            adapter_root="/srv/adapters",
        )
        for name, pool in (("e1", "shared"), ("e2", "shared"), ("d1", "dedicated"))
    ]


@pytest.fixture
def patch(world, django_capture_on_commit_callbacks):
    """PATCH as a persona; what the service leaves for after commit runs, as in production."""

    def run(who: str | Any, body: dict[str, Any], url: str = URL) -> Any:
        client = world.client(who) if isinstance(who, str) else who
        with django_capture_on_commit_callbacks(execute=True):
            return client.patch(url, body, format="json")

    return run


def updates() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="adapter.update", object_id="acme/support"))


def fields_of(adapter: Adapter) -> dict[str, Any]:
    return {
        k: getattr(adapter, k)
        for k in (
            "warmup_policy",
            "warmup_days",
            "warmup_start",
            "warmup_end",
            "warmup_timezone",
            "pool",
            "slo_class",
            "description",
        )
    }


def test_a_maintainer_sets_a_business_hours_window(world, engines, patch):
    response = patch("bob", WINDOW)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert {k: body[k] for k in WINDOW} == WINDOW
    entries = {e.name: e for e in PeriodicTask.objects.select_related("crontab")}
    assert set(entries) == {"warmup:acme/support:open", "warmup:acme/support:close"}
    opening, closing = entries["warmup:acme/support:open"], entries["warmup:acme/support:close"]
    assert (opening.crontab.hour, opening.crontab.minute) == ("9", "0")
    assert (closing.crontab.hour, closing.crontab.minute) == ("17", "30")
    assert str(opening.crontab.timezone) == "Europe/Berlin"
    assert json.loads(closing.kwargs) == {"adapter_id": world.support.pk, "phase": "close"}
    (event,) = updates()
    assert event.after is not None
    assert event.actor_label == "bob" and event.after["warmup_start"] == "09:00:00"
    # Back to on demand: the entries go.
    response = patch("bob", {"warmup_policy": "on_demand"})
    assert response.status_code == 200, response.json()
    assert not PeriodicTask.objects.exists()


def test_the_window_is_read_back_as_hh_mm(world, engines, patch):
    patch("bob", WINDOW)
    body = world.client("vera").get(URL).json()
    assert (body["warmup_start"], body["warmup_end"], body["warmup_days"]) == (
        "09:00",
        "17:30",
        "mon-fri",
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"warmup_start": "9am"}, "warmup_start"),
        ({"warmup_end": "25:00"}, "warmup_end"),
        ({"warmup_timezone": "Mars/Olympus_Mons"}, "warmup_timezone"),
        ({"warmup_days": "fri-mon"}, "warmup_days"),
        ({**WINDOW, "warmup_end": None}, "warmup_end"),
        ({**WINDOW, "warmup_start": None}, "warmup_start"),
        ({**WINDOW, "warmup_end": "09:00"}, "warmup_end"),
        ({"pool": "Not A Slug"}, "pool"),
    ],
)
def test_a_bad_window_is_refused_naming_the_field(world, engines, patch, body, field):
    before = fields_of(world.support)
    response = patch("bob", body)
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and field in error["details"]["fields"]
    assert error["message"].startswith(f"{field}: ")
    world.support.refresh_from_db()
    assert fields_of(world.support) == before and not updates()


def test_pinning_over_the_tenants_pin_quota_is_refused(world, engines, patch):
    Adapter.objects.create(
        tenant=world.acme, name="billing", base_model=world.base, warmup_policy="pinned"
    )
    world.acme.quota_pinned_slots = 1
    world.acme.save()
    before = fields_of(world.support)
    response = patch("bob", {"warmup_policy": "pinned", "description": "pin it"})
    assert response.status_code == 409, response.json()
    error = response.json()["error"]
    assert error["code"] == "schedule.pin_quota"
    assert "acme/billing" in error["message"] and "quota_pinned_slots" in error["message"]
    assert [p["code"] for p in error["details"]["problems"]] == ["schedule.pin_quota"]
    world.support.refresh_from_db()
    assert fields_of(world.support) == before
    assert not updates() and not PeriodicTask.objects.exists()
    # Within the quota, the same request passes (a pin has no beat entries: it applies at once).
    world.acme.quota_pinned_slots = 2
    world.acme.save()
    assert patch("bob", {"warmup_policy": "pinned"}).status_code == 200
    assert not PeriodicTask.objects.exists()


def test_a_warm_policy_in_a_pool_without_engines_is_refused(world, patch):
    response = patch("bob", {"warmup_policy": "always_warm"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "schedule.no_engine"


@pytest.mark.parametrize("who", ["bob", "alice"])
@pytest.mark.parametrize("body", [{"pool": "dedicated"}, {"slo_class": "gold"}])
def test_tenant_members_cannot_change_pool_or_slo_class(world, engines, patch, who, body):
    before = fields_of(world.support)
    response = patch(who, body)
    assert response.status_code == 403, response.json()
    error = response.json()["error"]
    assert error["code"] == "adapter.platform_field"
    assert "platform admin" in error["message"] and next(iter(body)) in error["message"]
    world.support.refresh_from_db()
    assert fields_of(world.support) == before and not updates()


def test_a_member_may_send_back_the_unchanged_platform_fields(world, patch):
    response = patch("bob", {"pool": "", "slo_class": "", "description": "edited"})
    assert response.status_code == 200, response.json()
    assert Adapter.objects.get(pk=world.support.pk).description == "edited"


def test_creating_an_adapter_with_platform_fields_needs_a_platform_admin(world):
    response = world.client("bob").post(
        "/api/v1/tenants/acme/adapters/",
        {"name": "fresh", "base_model": world.base.name, "slo_class": "gold"},
        format="json",
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "adapter.platform_field"
    assert not Adapter.objects.filter(name="fresh").exists()
    assert not AuditEvent.objects.filter(action="adapter.create").exists()


def test_a_platform_admin_moves_an_adapter_to_another_pool(world, engines, patch):
    response = patch("adam", {"pool": "dedicated", "slo_class": "gold"})
    assert response.status_code == 200, response.json()
    assert (response.json()["pool"], response.json()["slo_class"]) == ("dedicated", "gold")
    world.support.refresh_from_db()
    assert (world.support.pool, world.support.slo_class) == ("dedicated", "gold")
    (event,) = updates()
    assert event.actor_label == "adam"
    assert event.before == {"pool": "", "slo_class": ""}
    assert event.after == {"pool": "dedicated", "slo_class": "gold"}


def test_a_platform_admin_still_cannot_edit_tenant_fields(world, patch):
    for body in ({"description": "mine"}, {"pool": "dedicated", "description": "mine"}):
        response = patch("adam", body)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "permission.denied"
    assert not updates()


def test_moving_a_warm_adapter_keeps_the_rules(world, engines, patch):
    assert patch("bob", {"warmup_policy": "always_warm"}).status_code == 200
    response = patch("adam", {"pool": "empty-pool"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "schedule.no_engine"
    assert Adapter.objects.get(pk=world.support.pk).pool == ""


@pytest.mark.parametrize(
    ("scopes", "bound", "code"),
    [(["write"], False, "token.missing_scope"), (["admin"], True, "token.tenant_bound")],
)
def test_a_platform_admins_token_needs_admin_scope_and_no_tenant(world, patch, scopes, bound, code):
    client = world.token_client("adam", scopes, tenant=world.acme if bound else None)
    response = patch(client, {"pool": "dedicated"})
    assert response.status_code == 403, response.json()
    assert response.json()["error"]["code"] == code
    assert not updates()
    client = world.token_client("adam", ["admin"])
    assert patch(client, {"pool": "dedicated"}).status_code == 200
