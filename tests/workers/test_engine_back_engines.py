"""A warming engine (back from down) on a real CPU vLLM engine (--max-cpu-loras 3): the converge
pass that has loaded what it could moves it up, even when a wish could not be loaded; it no
longer waits, out of service, for a pass that would load every wish."""

from __future__ import annotations

import pytest

from adapters.models import Adapter
from tests.workers.fleet import servable_version
from workers.controller import converge_engine
from workers.desired import set_desired
from workers.models import Engine, EngineState

pytestmark = [pytest.mark.engine, pytest.mark.django_db]


def test_a_warming_engine_is_up_after_a_pass_that_could_not_load_every_wish(fleet, tmp_path):
    world = fleet.world
    versions = [
        servable_version(
            Adapter.objects.create(tenant=world.acme, name=f"w{i}", base_model=world.base),
            tmp_path,
            seed=4480 + i,
        )
        for i in range(fleet.a.max_cpu_loras + 1)
    ]
    for version in versions:
        set_desired(version=version, engine=fleet.a, state="registered", reason="t", converge=False)
    Engine.objects.filter(pk=fleet.a.pk).update(state=EngineState.WARMING)  # back from down

    report = converge_engine(fleet.a)

    # One wish more than the engine's cache: a wish never displaces an equal one, so the plan
    # skips it; what the engine holds is servable now.
    assert len(report.resident) == fleet.a.max_cpu_loras
    assert [s["code"] for s in report.skipped if s["action"] == "load"] == ["implicit-eviction"]
    assert Engine.objects.get(pk=fleet.a.pk).state == EngineState.UP
