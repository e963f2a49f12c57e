"""The gateway's engine behaviour on real engines: a cold load never holds up requests for a
resident adapter, an engine that dies while requests flow is routed around, and a load refused
for want of a slot waits (bounded) for one instead of failing at once."""

from __future__ import annotations

import threading
import time

import openai
import pytest

from adapters.access import AccessContext
from tenants.services.tokens import token_issue
from tests.fixtures.gateway import ROOM_WAIT_S, gateway_log_tail
from tests.workers.fleet import residency_report, servable_version
from workers import shared_state
from workers.controller import converge_engine
from workers.desired import NO_ROOM_CODES, set_desired
from workers.engine_slots import slot_enter, slot_leave

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
PROMPT = [{"role": "user", "content": "hi"}]


def client_for(world, base_url: str) -> openai.OpenAI:
    token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["inference"], tenant=world.acme
    )
    return openai.OpenAI(base_url=base_url + "/v1", api_key=token.plaintext, max_retries=0)


def ask(client, model: str) -> str:
    reply = client.chat.completions.create(model=model, messages=PROMPT, max_tokens=2)
    return reply.model


def test_a_cold_load_does_not_delay_requests_for_a_resident_adapter(
    worker_fleet,
    gateway_server,
    tmp_path,
):
    from adapters.models import Adapter

    world = worker_fleet.world
    # One engine only, so both adapters must share it.
    worker_fleet.b.state = "down"
    worker_fleet.b.save()  # a save, not update(): the gateway's tables follow saves
    hot = servable_version(world.support, tmp_path, seed=301)
    other = Adapter.objects.create(tenant=world.acme, name="cold", base_model=world.base)
    cold = servable_version(other, tmp_path, seed=302)
    set_desired(version=hot, engine=worker_fleet.a, state="registered", reason="t", converge=False)
    converge_engine(worker_fleet.a)
    client = client_for(world, gateway_server)
    assert ask(client, "support") == hot.served_name  # resident: served at once

    # Hold the engine's controller lock: the cold version's load must wait for it.
    lock = shared_state.engine_lock(worker_fleet.a.name, lease_s=30, wait_s=5)
    assert lock.acquire()
    cold_done: list[float] = []

    def cold_request(cold_client: openai.OpenAI) -> None:
        assert ask(cold_client, "cold") == cold.served_name
        cold_done.append(time.monotonic())

    # Two requests for the cold version: the first starts its load, the second waits on it.
    # Their tokens are issued here: a database connection taken in a thread outlives it.
    waiters = [
        threading.Thread(target=cold_request, args=(client_for(world, gateway_server),))
        for _ in range(2)
    ]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.5)  # the cold requests are now waiting for the load
    hot_done = []
    for _ in range(5):
        assert ask(client, "support") == hot.served_name
        hot_done.append(time.monotonic())
    assert not cold_done  # every hot request finished while the cold one still waited
    lock.release()
    for waiter in waiters:
        waiter.join(timeout=120)
    assert len(cold_done) == 2 and min(cold_done) > max(hot_done)
    assert cold.served_name in residency_report(worker_fleet.handle_a)["resident"]
    # Each request is in the pool's demand history once: the one that led the load marked as a
    # cold load (gold protection counts those per class), the one that waited on it unmarked.
    deadline = time.monotonic() + 10
    while True:
        marks = [
            d.missed
            for d in shared_state.demand_history(worker_fleet.a.pool)
            if d.name == cold.served_name
        ]
        if len(marks) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    time.sleep(1.5)  # a third entry, if any, would come with the recorder's next flush
    marks = [
        d.missed
        for d in shared_state.demand_history(worker_fleet.a.pool)
        if d.name == cold.served_name
    ]
    assert sorted(marks) == [False, True]


def test_requests_fail_over_when_an_engine_dies(
    worker_fleet,
    gateway_server,
    tmp_path,
    engine_control,
):
    world = worker_fleet.world
    # Three threads in a loop pass the default 600 requests a minute on a fast machine, and a
    # 429 is not what this test is about.
    world.acme.quota_requests_per_minute = 1_000_000
    world.acme.save()  # a save, not update(): the gateway's tables follow saves
    version = servable_version(world.support, tmp_path, seed=303)
    for engine in (worker_fleet.a, worker_fleet.b):
        set_desired(version=version, engine=engine, state="registered", reason="t", converge=False)
        converge_engine(engine)
    client = client_for(world, gateway_server)
    results: list[tuple[float, float, bool]] = []  # (started, ended, answered)
    stop = threading.Event()

    def traffic(local: openai.OpenAI) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                ask(local, "support")
                ok = True
            except openai.APIError:
                ok = False
            results.append((started, time.monotonic(), ok))

    # Tokens issued here: a thread's own database connection would outlive the test.
    threads = [
        threading.Thread(target=traffic, args=(client_for(world, gateway_server),))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    time.sleep(2)
    killed_at = time.monotonic()
    engine_control.stop(worker_fleet.handle_a)  # SIGTERM, SIGKILL after 30 s: the group is gone
    stopped_at = time.monotonic()
    # At least 4 s of traffic after the engine is gone, and (on a loaded machine) until ten
    # requests have started since, for at most 30 s.
    deadline = stopped_at + 30
    time.sleep(4)
    while time.monotonic() < deadline and sum(at > stopped_at for at, _, _ in results) < 10:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(timeout=60)

    def timeline() -> str:
        """Each request from 1 s before the stop: start and end after the SIGTERM, answered?"""
        rows = [
            f"{at - killed_at:+7.2f} {end - killed_at:+7.2f} {'ok' if ok else 'ERROR'}"
            for at, end, ok in sorted(results)
            if end > killed_at - 1
        ]
        return (
            f"engine stopped {stopped_at - killed_at:.2f} s after its SIGTERM; requests:\n"
            + "\n".join(rows[-60:])
            + "\ngateway log:\n"
            + gateway_log_tail(gateway_server)
        )

    assert any(ok for at, _, ok in results if at < killed_at), timeline()
    after = [ok for at, _, ok in results if at > stopped_at]
    assert len(after) >= 10, timeline()
    # Requests that started after the engine was gone all went to the other engine.
    assert all(after), f"{after.count(False)} of {len(after)} failed after the engine stopped\n" + (
        timeline()
    )
    # Only requests already running on the dying engine may have failed.
    assert [ok for at, _, ok in results if at < killed_at].count(False) <= len(threads), timeline()
    assert ask(client, "support") == version.served_name


def _busy_engine(worker_fleet, tmp_path):
    """Engine a alone, its three cache slots held by versions with requests in flight (as other
    gateway replicas count them in Redis), and a version none of them is: (cold, busy)."""
    from adapters.models import Adapter

    world = worker_fleet.world
    worker_fleet.b.state = "down"
    worker_fleet.b.save()
    busy = []
    for i in range(3):
        adapter = Adapter.objects.create(tenant=world.acme, name=f"busy{i}", base_model=world.base)
        version = servable_version(adapter, tmp_path, seed=310 + i)
        set_desired(
            version=version, engine=worker_fleet.a, state="registered", reason="t", converge=False
        )
        busy.append(version)
    converge_engine(worker_fleet.a)
    resident = residency_report(worker_fleet.handle_a)["resident"]
    assert {v.served_name for v in busy} <= set(resident)
    for version in busy:
        # as another replica's request counts it (the same script: engine_slots.slot_enter)
        assert slot_enter(
            worker_fleet.a.name, version.served_name, max_loras=worker_fleet.a.max_loras
        )
    other = Adapter.objects.create(tenant=world.acme, name="cold", base_model=world.base)
    return servable_version(other, tmp_path, seed=320), busy


def _refused_for_room(engine: str, served_name: str) -> bool:
    """Wait (up to 60 s) until the controller refused the load for want of a slot."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        outcome = shared_state.load_outcome(engine, served_name) or ""
        if outcome.startswith("error:"):
            return shared_state.load_error(outcome)[0] in NO_ROOM_CODES
        time.sleep(0.02)
    return False


def test_a_load_refused_for_room_waits_for_a_slot_instead_of_failing(
    worker_fleet, gateway_server, tmp_path
):
    cold, busy = _busy_engine(worker_fleet, tmp_path)
    client = client_for(worker_fleet.world, gateway_server)
    outcome: dict[str, object] = {}

    def request() -> None:
        try:
            outcome["model"] = ask(client, "cold")
        except openai.APIStatusError as exc:
            outcome["error"] = exc

    caller = threading.Thread(target=request)
    caller.start()
    assert _refused_for_room(worker_fleet.a.name, cold.served_name)
    time.sleep(1.0)
    assert caller.is_alive() and not outcome  # still waiting for a slot: no 503
    for version in busy:  # the other replicas' requests end
        slot_leave(worker_fleet.a.name, version.served_name)
    caller.join(timeout=60)
    assert outcome == {"model": cold.served_name}
    assert cold.served_name in residency_report(worker_fleet.handle_a)["resident"]
    # Asked several times, the request is still in the demand history once.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        entries = [
            d.name
            for d in shared_state.demand_history(worker_fleet.a.pool)
            if d.name == cold.served_name
        ]
        if entries:
            break
        time.sleep(0.2)
    time.sleep(1.5)  # a second entry, if any, would come with the recorder's next flush
    history = shared_state.demand_history(worker_fleet.a.pool)
    assert [d.name for d in history].count(cold.served_name) == 1


def test_a_load_refused_for_room_past_the_wait_is_a_503_engine_busy(
    worker_fleet, gateway_server, tmp_path
):
    cold, _ = _busy_engine(worker_fleet, tmp_path)
    client = client_for(worker_fleet.world, gateway_server)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as refused:
        ask(client, "cold")
    assert time.monotonic() - started >= ROOM_WAIT_S  # it waited for room first
    assert refused.value.status_code == 503
    assert refused.value.response.headers["retry-after"] == "1"
    body = refused.value.response.json()["error"]
    assert body["code"] == "engine_busy" and "cold" in body["message"]
    assert cold.served_name not in residency_report(worker_fleet.handle_a)["resident"]
