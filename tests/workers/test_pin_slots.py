"""An engine's pins are its admission state in Redis (workers.engine_slots), on the
real engines (--max-loras 2 --max-cpu-loras 3).

The controller puts a pin into the engine's pinned set before it asks the engine, through a
script that checks the requests in flight leave room (else the pin waits for a later pass); the
gateway admits by that set; every converge pass sets it to what the engine reports pinned.
"""

from __future__ import annotations

import contextlib
import threading
import time

import httpx
import pytest

from adapters.access import AccessContext
from adapters.models import Adapter
from tenants.services.tokens import token_issue
from tests.faults.test_engine_stalled import stopped
from tests.fixtures.gateway import ROOM_WAIT_S, running_gateway_process
from tests.fixtures.shared_counts import forget_engine
from tests.gateway.hostile_support import paused_engine
from tests.workers.fleet import chat, residency_report, servable_version
from workers import engine_slots, shared_state
from workers.controller import EngineBusy, converge_engine
from workers.desired import set_desired
from workers.models import FleetAction
from workers.redis_contract.keys import inflight_key, pinned_key


def versions(world, tmp_path, count: int, seed: int):
    adapters = [
        Adapter.objects.create(tenant=world.acme, name=f"p{seed}-{i}", base_model=world.base)
        for i in range(count)
    ]
    return [servable_version(a, tmp_path, seed=seed + i) for i, a in enumerate(adapters)]


def want(engine, version, state: str) -> None:
    set_desired(version=version, engine=engine, state=state, reason="test", converge=False)


def pinned_set(engine) -> set[str]:
    return set(engine_slots.pinned_since(engine.name))


@pytest.mark.django_db
def test_a_pin_claim_needs_room_among_the_versions_in_flight():
    """The script alone: a pin goes into the set only when the distinct unpinned versions in
    flight keep an unpinned slot each after it."""
    engine = "e-claim"
    forget_engine(engine)
    shared_state.client().hset(inflight_key(engine), mapping={"a": 1, "b": 3})
    try:
        # max_loras 2: a and b need both slots; a pin would leave one.
        assert engine_slots.pin_claim(engine, "p", max_loras=2) == "no_room"
        assert engine_slots.pinned_since(engine) == {}
        # The version being pinned needs no unpinned slot of its own.
        assert engine_slots.pin_claim(engine, "b", max_loras=2) == "ok"
        assert set(engine_slots.pinned_since(engine)) == {"b"}
        # b pinned: a alone takes the one unpinned slot left; a second pin needs 3 slots.
        assert engine_slots.pin_claim(engine, "p", max_loras=2) == "no_room"
        assert engine_slots.pin_claim(engine, "p", max_loras=3) == "ok"
    finally:
        forget_engine(engine)


@pytest.mark.django_db
def test_a_warm_up_request_of_the_controller_is_admitted_as_the_gateways_are():
    """The controller's own one-token warm-ups go through the same admission: counted in the
    engine's in-flight hash, refused when their version would be one unpinned adapter too many."""
    engine = "e-warm"
    client = shared_state.client()
    forget_engine(engine)
    client.zadd(pinned_key(engine), {"p": 1.0})
    client.hset(inflight_key(engine), mapping={"a": 1})
    try:
        assert not engine_slots.slot_enter(engine, "b", max_loras=2)  # a and b, one slot
        assert engine_slots.slot_enter(engine, "a", max_loras=2)  # already in flight
        assert engine_slots.slot_enter(engine, "p", max_loras=2)  # pinned: its own slot
        assert shared_state.inflight_counts(engine) == {"a": 2, "p": 1}
        engine_slots.slot_leave(engine, "p")
        engine_slots.slot_leave(engine, "a")
        assert shared_state.inflight_counts(engine) == {"a": 1}
    finally:
        forget_engine(engine)


@pytest.mark.engine
@pytest.mark.django_db
def test_the_controller_skips_a_pin_while_the_requests_in_flight_leave_no_room(fleet, tmp_path):
    """Requests the gateway admits after the pass took its snapshot are in the engine's
    in-flight hash but not in the plan (here: two versions the snapshot does not see). The pin
    is then skipped with its code, the engine is not asked, and the next pass pins."""
    (hot,) = versions(fleet.world, tmp_path, 1, seed=900)
    want(fleet.a, hot, "pinned")
    late = ["acme--late--v1-00000001", "acme--late--v1-00000002"]
    for name in late:  # as other replicas' requests count them (the same script)
        assert engine_slots.slot_enter(fleet.a.name, name, max_loras=fleet.a.max_loras)
    report = converge_engine(fleet.a)

    skipped = [(s["action"], s["version"], s["code"]) for s in report.skipped]
    assert ("pin", hot.served_name, "fleet.pin_no_room") in skipped
    assert hot.served_name in residency_report(fleet.handle_a)["resident"]  # loaded
    assert residency_report(fleet.handle_a)["pinned"] == []  # never asked to pin
    assert not FleetAction.objects.filter(engine=fleet.a, kind="pin").exists()
    assert pinned_set(fleet.a) == set()

    for name in late:  # those requests ended
        engine_slots.slot_leave(fleet.a.name, name)
    converge_engine(fleet.a)
    assert residency_report(fleet.handle_a)["pinned"] == [hot.served_name]
    assert pinned_set(fleet.a) == {hot.served_name}


@pytest.mark.engine
@pytest.mark.django_db
def test_the_pinned_set_follows_the_engine_after_redis_lost_it_and_after_a_restart(
    fleet, tmp_path, engine_control
):
    (hot,) = versions(fleet.world, tmp_path, 1, seed=910)
    want(fleet.a, hot, "pinned")
    converge_engine(fleet.a)
    assert residency_report(fleet.handle_a)["pinned"] == [hot.served_name]
    assert pinned_set(fleet.a) == {hot.served_name}

    # Redis restarted empty (no persistence): every fleet key is gone. (Not FLUSHDB: the test
    # session's Celery broker lives in the same database.)
    client = shared_state.client()
    for key in client.scan_iter(match="lp:fleet:*", count=1000):
        client.delete(key)
    assert pinned_set(fleet.a) == set()
    converge_engine(fleet.a)  # nothing to do on the engine: the set comes back from it
    assert pinned_set(fleet.a) == {hot.served_name}

    # The engine restarts and forgets its pins; the set must not keep the pin it lost.
    want(fleet.a, hot, "registered")  # so the pass below does not pin it again
    engine_control.stop(fleet.handle_a)
    engine_control.start(fleet.handle_a)
    assert pinned_set(fleet.a) == {hot.served_name}  # stale until a pass observes the engine
    converge_engine(fleet.a)
    assert residency_report(fleet.handle_a)["pinned"] == []
    assert pinned_set(fleet.a) == set()


@pytest.mark.engine
@pytest.mark.django_db
def test_an_unpin_leaves_the_set_only_after_the_engine_unpinned(fleet, tmp_path, settings):
    """An operator's pin, no longer wished, goes at once: the anti-thrash hold is for the
    policy's own pins."""
    settings.FLEET_PIN_MIN_HOLD_SECONDS = 30
    (hot,) = versions(fleet.world, tmp_path, 1, seed=920)
    want(fleet.a, hot, "pinned")
    converge_engine(fleet.a)
    assert pinned_set(fleet.a) == {hot.served_name}
    want(fleet.a, hot, "registered")
    report = converge_engine(fleet.a)
    assert ("unpin", hot.served_name, True) in [
        (a["action"], a["version"], a["ok"]) for a in report.actions
    ]
    assert residency_report(fleet.handle_a)["pinned"] == []
    assert pinned_set(fleet.a) == set()


def _stream(base: str, token: str, model: str, max_tokens: int) -> tuple[int, str]:
    """One streaming chat request read to its end: (status, error code or '')."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me about tea."}],
        "stream": True,
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    headers = {"authorization": f"Bearer {token}"}
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json=body, headers=headers, timeout=300
    ) as response:
        text = "".join(response.iter_text())
    code = ""
    if response.status_code != 200:
        code = httpx.Response(response.status_code, content=text).json()["error"].get("code", "")
    elif '"error"' in text:
        code = "stream_error"
    return response.status_code, code


@pytest.mark.engine
@pytest.mark.django_db(transaction=True)
def test_pins_placed_while_other_adapters_stream_never_kill_the_engine(
    worker_fleet, celery_worker_process, tmp_path
):
    """On one engine (--max-loras 2): two adapters stream while a third is pinned, then more
    streams for all three come in while the pin holds. A batch with more distinct unpinned
    adapters than unpinned slots would kill vLLM's engine core (KeyError in convert_mapping).
    Every answer is a 200 or a capacity answer; the engine serves afterwards."""
    world = worker_fleet.world
    worker_fleet.b.state = "down"
    worker_fleet.b.save()  # a save: the gateway's tables follow saves
    hot, a, b = versions(world, tmp_path, 3, seed=930)
    for version in (hot, a, b):
        want(worker_fleet.a, version, "registered")
    converge_engine(worker_fleet.a)
    assert set(residency_report(worker_fleet.handle_a)["resident"]) == {
        v.served_name for v in (hot, a, b)
    }
    token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["inference"], tenant=world.acme
    ).plaintext
    answers: list[tuple[int, str]] = []
    with running_gateway_process(
        celery_worker_process["queue"],
        GATEWAY_REFRESH_SECONDS="0",
        GATEWAY_LOAD_ROOM_WAIT_SECONDS=str(ROOM_WAIT_S),
        # Its lease outlives the stop below: another replica on this Redis (the suite's shared
        # gateway) would give back the holds of a replica whose lease lapsed.
        GATEWAY_REPLICA_LEASE_SECONDS="120",
    ) as (base, gateway):

        def client(model: str, max_tokens: int, times: int = 1) -> threading.Thread:
            def run() -> None:
                for _ in range(times):
                    answers.append(_stream(base, token, model, max_tokens))

            thread = threading.Thread(target=run)
            thread.start()
            return thread

        adapter_name = {v.served_name: v.adapter.name for v in (hot, a, b)}
        # Both streams are let in while the engine is paused (on a busy machine the second one's
        # admission came after the first had ended, once), and the gateway is stopped before
        # the engine goes on: both stay in flight (counted, not given back) all through the pass
        # below, on any machine (two streams read as they came ended before the pass looked, in
        # the full run once; and a caller that reads nothing does not hold them: the gateway's
        # socket takes some 1.7 MB unread on loopback).
        inflight = inflight_key(worker_fleet.a.name)
        with contextlib.ExitStack() as stopped_gateway:
            with paused_engine(worker_fleet.handle_a):
                streams = [client(adapter_name[v.served_name], 900) for v in (a, b)]
                deadline = time.monotonic() + 60
                while (
                    len(shared_state.client().hgetall(inflight)) < 2 and time.monotonic() < deadline
                ):
                    time.sleep(0.05)
                stopped_gateway.enter_context(stopped([gateway.pid]))  # uvicorn: one process
            assert len(shared_state.inflight_counts(worker_fleet.a.name)) == 2  # both streaming
            want(worker_fleet.a, hot, "pinned")
            first = converge_engine(worker_fleet.a)
            # Two unpinned adapters in flight on two slots: no room for a pin (the plan's rules
            # refuse it when the pass sees both streams; the pinned-set claim when they came
            # after its snapshot).
            assert residency_report(worker_fleet.handle_a)["pinned"] == []
            assert {s["code"] for s in first.skipped} & {
                "no-gpu-slot",
                "pins-starve-requests",
                "fleet.pin_no_room",
            }
        # The gateway goes on: the two streams end.

        # Short requests for all three keep coming from three clients while passes run until
        # the pin fits (once at most one unpinned adapter is in flight) and is made.
        mixers = [client(adapter_name[v.served_name], 8, times=6) for v in (hot, a, b)]
        deadline = time.monotonic() + 120
        while not residency_report(worker_fleet.handle_a)["pinned"] and time.monotonic() < deadline:
            # EngineBusy: the worker's pass (asked for by held requests) holds the lock.
            with contextlib.suppress(EngineBusy):
                converge_engine(worker_fleet.a)
            time.sleep(0.2)
        assert residency_report(worker_fleet.handle_a)["pinned"] == [hot.served_name]
        for thread in streams + mixers:
            thread.join(timeout=300)

    assert len(answers) == 2 + 3 * 6
    capacity = [(s, c) for s, c in answers if s == 429 or (s, c) == (503, "engine_busy")]
    assert sorted(set(answers) - set(capacity)) == [(200, "")], answers
    # The engine core is alive: every adapter and the base model still answer.
    for version in (hot, a, b):
        assert chat(worker_fleet.handle_a, version.served_name)
    assert chat(worker_fleet.handle_a, worker_fleet.handle_a.served_model_name)
