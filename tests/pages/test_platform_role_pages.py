"""The operators' fleet-wide pages, the dashboard's fleet numbers, and the platform admins'
tenants, users and base models, through the pages, checked in the database and the audit."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from adapters.models import BaseModel
from core.audit_models import AuditEvent
from tenants.models import Tenant
from tests.factories import TINY_HF_CONFIG
from tests.pages.routes import FLEET_ENGINE, _fleet_engine
from workers.alarms import alarm_raise
from workers.models import Engine, Residency

pytestmark = pytest.mark.django_db


@pytest.fixture
def engine(pages):
    _fleet_engine(pages)
    return Engine.objects.get(name=FLEET_ENGINE)


def _pin(pages, engine):
    Residency.objects.create(
        engine=engine, version=pages.active, desired_state="pinned", observed_state="pinned"
    )
    Residency.objects.create(
        engine=engine,
        version=pages.validated,
        desired_state="resident_cpu",
        observed_state="resident_cpu",
    )


def test_pools_show_their_engines_and_what_is_bound_to_them(pages, engine):
    Tenant.objects.filter(slug="globex").update(pool="legal-pool")
    page = pages.client("olga").get(reverse("fleet-pools")).content.decode()
    assert 'id="pool-shared"' in page and FLEET_ENGINE in page
    legal = page[page.index('id="pool-legal-pool"') :]
    assert "globex" in legal and "none: adapters bound here cannot be served" in legal


def test_residency_lists_every_engine_row_and_pins_narrow_it(pages, engine):
    _pin(pages, engine)
    olga = pages.client("olga")
    every = olga.get(reverse("fleet-residency")).content.decode()
    pins = olga.get(reverse("fleet-residency") + "?pinned=1").content.decode()
    assert f"acme/support@{pages.active.number}" in every
    assert f"acme/support@{pages.validated.number}" in every
    assert f"acme/support@{pages.active.number}" in pins
    assert f"acme/support@{pages.validated.number}" not in pins


def test_open_alarms_are_listed_and_counted_on_the_dashboard(pages, engine):
    alarm_raise(engine=engine, kind="thrash", subject="", message="loads every few seconds")
    assert (
        "loads every few seconds"
        in pages.client("olga").get(reverse("fleet-alarms")).content.decode()
    )
    dashboard = pages.client("olga").get(reverse("dashboard")).content.decode()
    numbers = dashboard[dashboard.index('data-testid="fleet-numbers"') :]
    assert "loads every few seconds" in numbers
    assert (
        'data-testid="fleet-numbers"'
        not in pages.client("alice").get(reverse("dashboard")).content.decode()
    )


def test_the_dashboard_shows_members_no_engine_list(pages, engine):
    html = pages.client("nora").get(reverse("dashboard")).content.decode()
    assert FLEET_ENGINE not in html


def test_schedules_list_adapters_with_a_warmup_policy(pages, engine):
    from adapters.models import Adapter

    Adapter.objects.filter(pk=pages.world.support.pk).update(warmup_policy="always_warm")
    page = pages.client("olga").get(reverse("fleet-schedules")).content.decode()
    assert "acme/support" in page and "always_warm" in page


def test_a_platform_admin_creates_a_tenant_and_changes_its_plan(pages):
    admin = pages.client("adam")
    made = admin.post(
        reverse("platform-home"), {"slug": "initech", "name": "Initech", "slo_class": "bronze"}
    )
    assert made.status_code == 302
    assert Tenant.objects.get(slug="initech").slo_class == "bronze"
    changed = admin.post(
        reverse("platform-tenant", args=["initech"]),
        {"name": "Initech", "slo_class": "gold", "quota_adapters": "3"},
    )
    assert changed.status_code == 302
    assert Tenant.objects.get(slug="initech").quota_adapters == 3
    assert AuditEvent.objects.filter(action="tenant.update", tenant_label="initech").exists()
    bad = admin.post(reverse("platform-home"), {"slug": "Not A Slug", "name": "x"})
    assert bad.status_code == 400 and b"tenant.invalid" in bad.content


def test_a_platform_admin_manages_users_but_not_their_own_login(pages):
    admin = pages.client("adam")
    admin.post(
        reverse("platform-users"),
        {
            "username": "zed",
            "password": "a-long-and-unusual-passphrase-42",
            "platform_roles": ["operator"],
        },
    )
    User = get_user_model()
    assert list(User.objects.get(username="zed").groups.values_list("name", flat=True)) == [
        "operator"
    ]
    admin.post(reverse("platform-user-roles", args=["zed"]), {"platform_roles": ["reviewer"]})
    assert list(User.objects.get(username="zed").groups.values_list("name", flat=True)) == [
        "reviewer"
    ]
    admin.post(reverse("platform-user-active", args=["zed"]), {"active": "false"})
    assert not User.objects.get(username="zed").is_active
    refused = admin.post(reverse("platform-user-active", args=["adam"]), {"active": "false"})
    assert refused.status_code == 400 and b"user.self_deactivate" in refused.content
    assert User.objects.get(username="adam").is_active


def test_a_platform_admin_registers_a_base_model(pages):
    admin = pages.client("adam")
    response = admin.post(
        reverse("platform-base-models"),
        {"name": "tiny-two", "source": "var/tiny-two", "hf_config": json.dumps(TINY_HF_CONFIG)},
    )
    assert response.status_code == 302
    assert "q_proj" in BaseModel.objects.get(name="tiny-two").module_dims
    broken = admin.post(
        reverse("platform-base-models"), {"name": "x", "source": "y", "hf_config": "{"}
    )
    assert broken.status_code == 400 and b"base_model.config_invalid" in broken.content


def test_an_operator_tunes_an_engine_but_only_an_admin_moves_it(pages, engine):
    olga, adam = pages.client("olga"), pages.client("adam")
    url = reverse("fleet-engine-edit", args=[FLEET_ENGINE])
    page = olga.get(reverse("fleet-engine", args=[FLEET_ENGINE])).content.decode()
    assert "Save settings" in page and 'name="url"' not in page
    assert olga.post(url, {"max_loras": "2", "max_cpu_loras": "4"}).status_code == 302
    tuned = Engine.objects.get(name=FLEET_ENGINE)
    assert (tuned.max_loras, tuned.max_cpu_loras, tuned.url) == (2, 4, "http://127.0.0.1:9")
    assert AuditEvent.objects.filter(action="engine.update", object_id=FLEET_ENGINE).exists()
    refused = olga.post(url, {"url": "http://10.9.9.9:8000"})
    assert refused.status_code == 403 and b"engine.location" in refused.content
    assert 'name="url"' in adam.get(reverse("fleet-engine", args=[FLEET_ENGINE])).content.decode()


def test_the_engine_page_shows_its_queue_by_class_and_keeps_it_live(pages, engine):
    """The slots each class holds there (every replica's, from the engine's load hash) drawn
    with the page, and the cells the fleet socket's messages update (static/portal/live.js)."""
    from workers import shared_state
    from workers.redis_contract.keys import load_key

    redis = shared_state.client()
    redis.hset(load_key(FLEET_ENGINE), mapping={"live": 3, "class:gold": 3})
    try:
        page = pages.client("olga").get(reverse("fleet-engine", args=[FLEET_ENGINE]))
    finally:
        redis.delete(load_key(FLEET_ENGINE))
    html = page.content.decode()
    section = html[html.index('id="classes"') :]
    assert f'data-live-classes="{FLEET_ENGINE}" data-socket="/ws/fleet/metrics/"' in html
    assert '<td data-class-slots="gold">3</td>' in section
    assert '<td data-class-slots="bronze">0</td>' in section
    assert "portal/live.js" in section


def test_the_advisor_page_shows_every_engines_flags(pages, engine):
    from workers.selectors import engine_advice

    page = pages.client("olga").get(reverse("fleet-advice")).content.decode()
    section = page[page.index(f'data-testid="advice-{FLEET_ENGINE}"') :]
    advised = engine_advice(engine)["advised"]["max_loras"]
    assert f"<code>--max-loras</code></td><td>{engine.max_loras}</td><td>{advised}</td>" in section


def test_a_platform_admin_edits_a_service_class_on_its_page(pages):
    from tenants.models import ServiceClass

    client = pages.client("adam")
    page = client.get(reverse("platform-classes")).content.decode()
    assert 'data-testid="class-gold"' in page and 'data-testid="class-bronze"' in page
    response = client.post(
        reverse("platform-classes"),
        {"name": "silver", "weight": "4", "max_queue_wait_ms": "3000", "sheddable": "false"},
    )
    assert response.status_code == 302
    silver = ServiceClass.objects.get(name="silver")
    assert (silver.weight, silver.max_queue_wait_ms, silver.sheddable) == (4, 3000, False)
    actor = AuditEvent.objects.get(action="service_class.update").actor
    assert actor is not None and actor.username == "adam"


def test_a_zero_weight_is_refused_on_the_page_and_nothing_changes(pages):
    from tenants.models import ServiceClass

    response = pages.client("adam").post(
        reverse("platform-classes"),
        {"name": "gold", "weight": "0", "max_queue_wait_ms": "10000", "sheddable": "false"},
    )
    assert response.status_code == 400
    assert "weight" in response.content.decode()
    assert ServiceClass.objects.get(name="gold").weight == 6
    assert not AuditEvent.objects.filter(action="service_class.update").exists()
