"""An engine's state is the prober's verdict (and drain/undrain's), its served model name the
platform admin's: operators cannot set either through the API or the fleet pages."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.audit_models import AuditEvent
from workers.models import Engine

pytestmark = pytest.mark.django_db


@pytest.fixture
def cpu1(world):
    return Engine.objects.create(
        name="cpu-1",
        base_model=world.base,
        url="http://127.0.0.1:9",
        served_model_name="tiny",
        adapter_root="/srv/adapters",
        state="down",
    )


def _unchanged(engine: Engine) -> None:
    fresh = Engine.objects.get(pk=engine.pk)
    assert (fresh.state, fresh.served_model_name) == ("down", "tiny")
    assert not AuditEvent.objects.filter(action="engine.update").exists()


@pytest.mark.parametrize("who", ["olga", "adam"])
def test_nobody_sets_an_engines_state_through_the_api(world, cpu1, who):
    response = world.client(who).patch("/api/v1/engines/cpu-1/", {"state": "up"}, format="json")
    assert response.status_code == 400, response.json()
    assert "prober" in str(response.json()["error"])
    _unchanged(cpu1)


def test_an_operator_cannot_rename_an_engines_model_through_the_api(world, cpu1):
    response = world.client("olga").patch(
        "/api/v1/engines/cpu-1/", {"served_model_name": "other"}, format="json"
    )
    assert response.status_code == 403, response.json()
    assert response.json()["error"]["code"] == "engine.location"
    _unchanged(cpu1)


def test_a_platform_admin_may_rename_it(world, cpu1):
    response = world.client("adam").patch(
        "/api/v1/engines/cpu-1/", {"served_model_name": "other"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert Engine.objects.get(pk=cpu1.pk).served_model_name == "other"


def test_an_operator_cannot_set_either_through_the_settings_page(world, cpu1):
    client = world.client("olga")
    url = reverse("fleet-engine-edit", args=["cpu-1"])
    client.post(url, {"served_model_name": "other", "state": "up", "max_loras": "4"})
    fresh = Engine.objects.get(pk=cpu1.pk)
    assert (fresh.state, fresh.served_model_name) == ("down", "tiny")


def test_the_settings_page_offers_the_model_name_to_platform_admins_only(world, cpu1):
    pages = {}
    for who in ("olga", "adam"):
        pages[who] = world.client(who).get(reverse("fleet-engine", args=["cpu-1"])).content.decode()
    assert 'name="served_model_name"' not in pages["olga"]
    assert 'name="served_model_name"' in pages["adam"]
