"""The fleet's verdict on an engine that went away and came back, from its probes: found down,
it is shown holding nothing (the residency API never shows a version resident where nothing can
serve it) and watched until it answers; back, it is up at once when its plugin says it holds
every version wanted there, else warming until a converge pass has run."""

from __future__ import annotations

import pytest

from core.audit_models import AuditEvent
from tests.gateway.recording import engine_row, version
from workers import shared_state
from workers.controller import probe_fleet
from workers.models import Engine, EngineState, Residency, ResidencyState
from workers.services.engines import HOLDS, engine_record_probe

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(world):
    """Engine `e` up, holding support@1 (wanted there) and support@2 (not wanted any more)."""
    engine = engine_row(world, "e", "shared")
    wanted, unwanted = version(world.support, 1), version(world.support, 2)
    Residency.objects.create(
        engine=engine,
        version=wanted,
        desired_state=ResidencyState.REGISTERED,
        observed_state=ResidencyState.PINNED,
    )
    Residency.objects.create(
        engine=engine,
        version=unwanted,
        desired_state=ResidencyState.ABSENT,
        observed_state=ResidencyState.RESIDENT_CPU,
    )
    return engine, wanted, unwanted


def _observed(engine: Engine) -> set[str]:
    return set(Residency.objects.filter(engine=engine).values_list("observed_state", flat=True))


def test_an_engine_found_down_is_shown_holding_nothing(held):
    engine, _, _ = held
    down = engine_record_probe(engine=engine, error="engine.unreachable: refused")
    assert down.state == EngineState.DOWN
    assert _observed(engine) == {ResidencyState.ABSENT}
    after = AuditEvent.objects.get(action="engine.state", object_id="e").after or {}
    assert after["state"] == "down" and after["residency_forgotten"] == 2


def test_a_draining_engine_that_fails_a_probe_keeps_its_residency(held):
    engine, _, _ = held
    Engine.objects.filter(pk=engine.pk).update(state=EngineState.DRAINING)
    engine_record_probe(engine=engine, error="engine.unreachable: refused")
    assert ResidencyState.PINNED in _observed(engine)


def test_back_from_down_holding_every_wish_it_is_up_at_once(held):
    engine, wanted, _ = held
    engine_record_probe(engine=engine, error="engine.unreachable: refused")
    back = engine_record_probe(
        engine=engine, error="", capabilities={"has_plugin": True, HOLDS: {wanted.served_name}}
    )
    assert back.state == EngineState.UP


@pytest.mark.parametrize(
    "holds", [set(), None], ids=["it holds nothing wanted", "what it holds is not known"]
)
def test_back_from_down_without_its_wishes_it_warms(held, holds):
    engine, _, unwanted = held
    engine_record_probe(engine=engine, error="engine.unreachable: refused")
    capabilities = {} if holds is None else {HOLDS: holds | {unwanted.served_name}}
    back = engine_record_probe(engine=engine, error="", capabilities=capabilities)
    assert back.state == EngineState.WARMING


def test_the_prober_watches_an_engine_it_finds_down(world, settings):
    """Found down by the prober's beat (not only by a pass or a gateway), the engine is
    probed again every FLEET_DOWN_PROBE_SECONDS: its return is seen within that."""
    settings.FLEET_DOWN_PROBE_SECONDS = 30.0
    engine = engine_row(world, "gone", "shared")  # nothing listens on its port
    watch = f"{shared_state._PREFIX}:watch:gone"
    shared_state.client().delete(watch)
    assert probe_fleet()["gone"] != "up"
    assert Engine.objects.get(pk=engine.pk).state == EngineState.DOWN
    assert shared_state.client().exists(watch)
