"""/healthz against the real database, Redis, a Celery worker and two CPU vLLM engines."""

from __future__ import annotations

import pytest

from tests.factories import tiny_base_model
from workers.models import Engine

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def fresh_checks(settings):
    """These tests watch parts go down and up: every probe checks (the cache has its own test)."""
    settings.HEALTHZ_CACHE_SECONDS = 0


@pytest.fixture
def registered_engines(engines, celery_worker_process, settings):
    base = tiny_base_model()
    settings.PORTAL_ENGINE_KEYS = {h.name: h.engine_key for h in engines}  # each its own
    return [
        Engine.objects.create(
            name=handle.name,
            base_model=base,
            url=handle.base_url,
            served_model_name=handle.served_model_name,
            adapter_root=str(handle.adapter_root),
            max_loras=handle.max_loras,
            max_cpu_loras=handle.max_cpu_loras,
            max_lora_rank=handle.max_lora_rank,
            has_plugin=True,
        )
        for handle in engines
    ]


def _engine_states(body):
    return {engine["name"]: engine["ok"] for engine in body["engines"]}


def test_it_is_green_when_every_part_is_up(client, registered_engines):
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert body["database"]["ok"] and body["redis"]["ok"] and body["celery"]["ok"]
    assert all(_engine_states(body).values())


def test_it_reports_a_stopped_engine_as_down_and_recovers(
    client, registered_engines, engines, engine_control
):
    victim = engines[1]
    engine_control.stop(victim)
    response = client.get("/healthz")
    assert response.status_code == 503
    states = _engine_states(response.json())
    assert states == {engines[0].name: True, victim.name: False}
    engine_control.start(victim)
    response = client.get("/healthz")
    assert response.status_code == 200, response.json()


def test_an_optional_engine_does_not_fail_the_check(
    client, registered_engines, engines, engine_control
):
    Engine.objects.filter(name=engines[1].name).update(required=False)
    engine_control.stop(engines[1])
    response = client.get("/healthz")
    assert response.status_code == 200
    assert _engine_states(response.json())[engines[1].name] is False


def test_it_is_a_json_503_without_a_celery_worker(client, db, monkeypatch):
    from portal import health

    monkeypatch.setattr(health.celery_app.control, "ping", lambda timeout: [])
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["celery"] == {"ok": False, "workers": 0}


def test_only_operators_see_the_reasons(client, world, monkeypatch):
    from portal import health
    from workers.models import Engine

    monkeypatch.setattr(health.celery_app.control, "ping", lambda timeout: [])
    Engine.objects.create(
        name="gone",
        base_model=world.base,
        url="http://127.0.0.1:9/",
        served_model_name="tiny-llama",
        adapter_root="/srv/adapters",
    )
    anonymous = client.get("/healthz").json()
    assert anonymous["engines"] == [{"name": "gone", "ok": False, "required": True}]
    assert "127.0.0.1:9" not in str(anonymous) and "error" not in str(anonymous)
    client.force_login(world.users["olga"])
    operator = client.get("/healthz").json()
    assert operator["celery"]["error"] == "no worker answered a ping"
    assert operator["engines"][0]["error"]
    client.force_login(world.users["alice"])
    assert "error" not in str(client.get("/healthz").json())
