"""The engine prober against real engines: up, stopped (down, audited), started again (up)."""

from __future__ import annotations

import pytest

from core.audit_models import AuditEvent
from tests.factories import tiny_base_model
from workers.models import Engine
from workers.services.engines import engines_probe_all

pytestmark = [pytest.mark.engine, pytest.mark.django_db]


@pytest.fixture
def engine_rows(engines, settings):
    settings.PORTAL_ENGINE_KEYS = {h.name: h.engine_key for h in engines}  # each its own
    base = tiny_base_model()
    return [
        Engine.objects.create(
            name=h.name,
            base_model=base,
            url=h.base_url,
            served_model_name=h.served_model_name,
            adapter_root=str(h.adapter_root),
        )
        for h in engines
    ]


def test_a_probe_moves_engines_between_up_and_down(engine_rows, engines, engine_control):
    assert set(engines_probe_all().values()) == {"up"}
    assert set(Engine.objects.values_list("state", flat=True)) == {"up"}
    # The context length as the engines report it: the gateway's cap for requests naming none.
    lengths = {h.process.config.max_model_len for h in engines}
    assert set(Engine.objects.values_list("max_model_len", flat=True)) == lengths
    engine_control.stop(engines[1])
    result = engines_probe_all()
    assert result[engines[0].name] == "up" and result[engines[1].name] != "up"
    down = Engine.objects.get(name=engines[1].name)
    assert down.state == "down" and down.last_error
    assert AuditEvent.objects.filter(
        action="engine.state", object_id=engines[1].name, after__state="down"
    ).exists()
    engine_control.start(engines[1])
    engines_probe_all()
    assert Engine.objects.get(name=engines[1].name).state == "up"


def test_a_draining_engine_stays_draining(engine_rows):
    Engine.objects.filter(pk=engine_rows[0].pk).update(state="draining")
    engines_probe_all()
    assert Engine.objects.get(pk=engine_rows[0].pk).state == "draining"
