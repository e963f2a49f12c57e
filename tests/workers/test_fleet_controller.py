"""The cache controller against two real CPU vLLM engines (--max-loras 2 --max-cpu-loras 3),
driven in-process: staging, verified loads, quarantine, what the engine holds equals what the
controller believes, pin storms, draining."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from adapters.access import AccessContext
from adapters.models import Adapter
from tests.workers.fleet import chat, residency_report, servable_version
from workers import engine_slots, shared_state
from workers.controller import converge_engine
from workers.desired import request_load, set_desired
from workers.models import (
    AlarmKind,
    EngineAlarm,
    EngineState,
    FleetAction,
    Residency,
    ResidencyState,
)
from workers.reconcile import stage_version_on_engine
from workers.services.engines import engine_operator_transition

pytestmark = [pytest.mark.engine, pytest.mark.django_db]


def adapters(world, count: int) -> list[Adapter]:
    return [
        Adapter.objects.create(tenant=world.acme, name=f"a{i}", base_model=world.base)
        for i in range(count)
    ]


def believed(engine) -> set[str]:
    return {
        r.version.served_name
        for r in Residency.objects.filter(engine=engine).select_related("version")
        if r.observed_state != ResidencyState.ABSENT
    }


def test_a_wanted_version_is_staged_verified_loaded_and_served(fleet, tmp_path):
    version = servable_version(fleet.world.support, tmp_path, seed=11)
    set_desired(version=version, engine=fleet.a, state="registered", reason="t", converge=False)

    report = converge_engine(fleet.a)

    assert version.served_name in report.resident
    staged = Path(fleet.a.adapter_root) / version.served_name
    assert sorted(p.name for p in staged.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    row = Residency.objects.get(engine=fleet.a, version=version)
    assert row.observed_state in (ResidencyState.RESIDENT_GPU, ResidencyState.RESIDENT_CPU)
    assert row.staged_at is not None
    assert row.load_latency_ms is not None and row.load_latency_ms > 0
    load = FleetAction.objects.get(engine=fleet.a, served_name=version.served_name, kind="load")
    assert load.ok and load.latency_ms is not None and load.latency_ms > 0
    # The engine really serves it: the adapter's greedy reply differs from the base model's.
    assert chat(fleet.handle_a, version.served_name) != chat(
        fleet.handle_a, fleet.handle_a.served_model_name
    )
    # A second pass changes nothing on the engine.
    assert converge_engine(fleet.a).actions == []


def test_a_tampered_node_copy_is_quarantined_never_loaded_then_restaged(fleet, tmp_path):
    version = servable_version(fleet.world.support, tmp_path, seed=12)
    stage_version_on_engine(engine_id=fleet.a.pk, version_id=version.pk)
    model = Path(fleet.a.adapter_root) / version.served_name / "adapter_model.safetensors"
    data = bytearray(model.read_bytes())
    data[-10] ^= 0xFF  # one byte of the weights, as an attacker on the node would
    model.write_bytes(bytes(data))
    set_desired(version=version, engine=fleet.a, state="registered", reason="t", converge=False)

    report = converge_engine(fleet.a)

    assert version.served_name not in report.resident
    assert version.served_name not in {
        r["name"] for r in residency_report(fleet.handle_a)["registered"]
    }
    alarm = EngineAlarm.objects.get(
        engine=fleet.a, kind=AlarmKind.QUARANTINE, cleared_at__isnull=True
    )
    assert alarm.subject == version.served_name and "files.sha256_mismatch" in alarm.message
    quarantined = list((Path(fleet.a.adapter_root) / ".quarantine").iterdir())
    assert [q.name.rsplit("-", 1)[0] for q in quarantined] == [version.served_name]
    assert FleetAction.objects.filter(kind="quarantine", served_name=version.served_name).exists()

    # The next pass brings a fresh copy from the store, loads it, and clears the alarm.
    report = converge_engine(fleet.a)
    assert version.served_name in report.resident
    alarm.refresh_from_db()
    assert alarm.cleared_at is not None


def test_what_the_engine_holds_equals_what_the_controller_believes(fleet, tmp_path):
    versions = [
        servable_version(adapter, tmp_path, seed=30 + i)
        for i, adapter in enumerate(adapters(fleet.world, 6))
    ]
    sequence = [0, 1, 2, 3, 0, 4, 5, 1, 2, 5, 0, 3]
    for index in sequence:
        name = versions[index].served_name
        # A miss, as the gateway reports it: the controller makes room and loads it...
        shared_state.demand_record("shared", name)
        report = converge_engine(fleet.a, incoming=name)
        assert name in report.resident
        # ...and a request is served through it.
        assert chat(fleet.handle_a, name)
        engine_says = residency_report(fleet.handle_a)
        assert set(engine_says["resident"]) == believed(fleet.a)
        # vLLM's own LRU never had to pick a victim: registered names are all in its cache.
        assert {r["name"] for r in engine_says["registered"]} == set(engine_says["resident"])
        assert len(engine_says["resident"]) <= fleet.a.max_cpu_loras
    # Every load and eviction went through the controller and is on record: the ledger balances.
    loads = FleetAction.objects.filter(engine=fleet.a, kind="load", ok=True).count()
    evictions = FleetAction.objects.filter(engine=fleet.a, kind="evict", ok=True).count()
    assert evictions > 0
    assert loads - evictions == len(residency_report(fleet.handle_a)["resident"])


def test_a_pin_storm_never_kills_the_engine(fleet, tmp_path):
    versions = [
        servable_version(adapter, tmp_path, seed=50 + i)
        for i, adapter in enumerate(adapters(fleet.world, 6))
    ]
    for version in versions:
        set_desired(version=version, engine=fleet.a, state="pinned", reason="storm", converge=False)
    report = converge_engine(fleet.a)

    engine_says = residency_report(fleet.handle_a)
    # min(max_loras, max_cpu_loras) - 1 pins at most: one GPU and one cache slot stay free.
    assert 1 <= len(engine_says["pinned"]) <= min(fleet.a.max_loras, fleet.a.max_cpu_loras) - 1
    assert {s["code"] for s in report.skipped} & {
        "too-many-pins",
        "pins-starve-requests",
        "implicit-eviction",
    }
    # Every version can still be served, one after another: the engine core is alive.
    for version in versions:
        shared_state.demand_record("shared", version.served_name)
        converge_engine(fleet.a, incoming=version.served_name)
        assert chat(fleet.handle_a, version.served_name)
    assert chat(fleet.handle_a, fleet.handle_a.served_model_name)
    assert set(residency_report(fleet.handle_a)["resident"]) == believed(fleet.a)


def test_policy_pins_are_given_up_while_the_gateway_holds_requests_back(fleet, tmp_path, settings):
    """Pins are for quiet engines: versions held at the gateway's pin guard count as served at
    once (gateway.pin_guard), so the pass unpins once the pin's minimum hold is over, and pins
    again once nothing is held."""
    settings.FLEET_PIN_MIN_HOLD_SECONDS = 30
    hot, other = (
        servable_version(adapter, tmp_path, seed=70 + i)
        for i, adapter in enumerate(adapters(fleet.world, 2))
    )
    for version in (hot, other):
        set_desired(version=version, engine=fleet.a, state="registered", reason="t", converge=False)
    for _ in range(20):
        shared_state.demand_record("shared", hot.served_name)
    converge_engine(fleet.a)
    assert residency_report(fleet.handle_a)["pinned"] == [hot.served_name]

    held = shared_state.held_key(fleet.a.name)
    now = time.time()  # two replicas hold requests for two versions
    shared_state.client().zadd(held, {other.served_name: now, "acme--x--v1-0": now})
    try:
        report = converge_engine(fleet.a)  # the pin was placed a moment ago: it is held
        assert residency_report(fleet.handle_a)["pinned"] == [hot.served_name]
        assert ("unpin", hot.served_name, "pin-hold") in [
            (s["action"], s["version"], s["code"]) for s in report.skipped
        ]
        settings.FLEET_PIN_MIN_HOLD_SECONDS = 0  # the hold is over
        converge_engine(fleet.a)
        assert residency_report(fleet.handle_a)["pinned"] == []
        row = Residency.objects.get(engine=fleet.a, version=hot)
        assert row.observed_state != ResidencyState.PINNED
        assert engine_slots.pinned_since(fleet.a.name) == {}  # what the gateway admits by
    finally:
        shared_state.client().delete(held)
    converge_engine(fleet.a)  # quiet again
    assert residency_report(fleet.handle_a)["pinned"] == [hot.served_name]


def test_a_draining_engine_finishes_its_requests_and_takes_no_new_ones(fleet, tmp_path):
    busy, other = (
        servable_version(a, tmp_path, seed=70 + i) for i, a in enumerate(adapters(fleet.world, 2))
    )
    set_desired(version=busy, engine=fleet.b, state="registered", reason="t", converge=False)
    converge_engine(fleet.b)
    replies: list[str] = []

    def long_request() -> None:
        # as the gateway counts it (the same script: engine_slots.slot_enter)
        assert engine_slots.slot_enter(fleet.b.name, busy.served_name, max_loras=fleet.b.max_loras)
        try:
            replies.append(
                chat(
                    fleet.handle_b,
                    busy.served_name,
                    "a long story",
                    max_tokens=600,
                    ignore_eos=True,
                )
            )
        finally:
            engine_slots.slot_leave(fleet.b.name, busy.served_name)

    worker = threading.Thread(target=long_request)
    worker.start()
    drained = engine_operator_transition(
        engine=fleet.b, verb="drain", access=AccessContext.for_user(fleet.world.users["olga"])
    )
    assert drained.state == EngineState.DRAINING

    with pytest.raises(Exception) as refused:
        request_load(version=other, engine=drained, wait_s=1)
    assert getattr(refused.value, "code", "") == "fleet.engine_not_loading"
    during = converge_engine(drained)
    if worker.is_alive():  # the request is still running: its adapter must not be evicted
        assert busy.served_name in during.resident
    worker.join(timeout=120)
    assert replies and replies[0]  # the request in flight finished with a reply

    after = converge_engine(drained)
    assert after.resident == []
    assert residency_report(fleet.handle_b)["registered"] == []  # nothing left on the engine
    assert other.served_name not in after.resident
