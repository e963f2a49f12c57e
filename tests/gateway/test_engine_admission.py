"""Admission (gateway.limits) against the real Redis: never more distinct unpinned adapters in
flight on an engine than unpinned GPU slots, the pins read from the engine's pinned set
(workers.engine_slots); the rate, the concurrency and the engine's in-flight count taken in one
script and all given back by `release`."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from gateway import limits
from gateway.errors import GatewayError
from gateway.pin_guard import PinGuardLink
from gateway.routes import Target
from tests.fixtures.shared_counts import forget_engine
from workers import engine_slots, shared_state
from workers.redis_contract.keys import conc_key, pinned_key


def _target(served_name: str, max_concurrent: int = 0) -> Target:
    return Target(
        served_name=served_name,
        version_id=1,
        tenant_id=0,
        tenant="acme",
        adapter=served_name,
        number=1,
        pool="shared",
        base_model_id=1,
        rank=8,
        max_concurrent=max_concurrent,
    )


def _admission(scripts, served_name: str, **kwargs) -> limits.Admission:
    fields: dict[str, Any] = {"tenant_id": 0, "rpm_limit": 0}
    fields.update(kwargs)
    terms = limits.Terms(target=_target(served_name), requested=served_name, **fields)
    return limits.Admission(scripts, terms)


def _pin(engine: str, *names: str) -> None:
    """The engine's pinned set as the controller writes it (before it pins at the engine)."""
    shared_state.client().zadd(pinned_key(engine), dict.fromkeys(names, 1.0))


async def test_with_a_pin_only_one_other_adapter_runs_at_a_time_on_two_slots(scripts):
    engine = f"e-{uuid.uuid4().hex[:6]}"
    _pin(engine, "p")

    async def admit(name: str) -> limits.Admission:
        admission = _admission(scripts, name)
        await admission.admit(engine, max_loras=2)
        return admission

    a1 = await admit("a")
    a2 = await admit("a")  # the same adapter again: no new slot needed
    await admit("p")  # the pinned one has its own slot
    waiting = asyncio.create_task(admit("b"))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # b would be the second unpinned adapter in a batch: it waits
    assert shared_state.inflight_counts(engine) == {"a": 2, "p": 1}
    await a1.release()
    await a2.release()
    await asyncio.wait_for(waiting, timeout=2)
    assert shared_state.inflight_counts(engine) == {"b": 1, "p": 1}
    forget_engine(engine)


async def test_the_pinned_set_in_redis_not_the_tables_decides(scripts):
    """The controller writes a pin into the engine's pinned set before the engine
    pins; the gateway's tables (the database's residency rows) only learn of it later. The
    admission script reads the set: with the set full, a new distinct unpinned adapter waits
    although the tables show no pin, and it goes in once the set empties (an unpin done)."""
    engine = f"e-{uuid.uuid4().hex[:6]}"
    first = _admission(scripts, "a")
    await first.admit(engine, max_loras=2)
    _pin(engine, "p")  # the controller's claim: p is being pinned; the tables show nothing yet
    waiting = asyncio.create_task(_admission(scripts, "b").admit(engine, max_loras=2))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # a second unpinned adapter beside the pin: it would kill vLLM
    assert shared_state.inflight_counts(engine) == {"a": 1}
    shared_state.client().zrem(pinned_key(engine), "p")  # unpinned at the engine
    await asyncio.wait_for(waiting, timeout=2)
    assert shared_state.inflight_counts(engine) == {"a": 1, "b": 1}
    forget_engine(engine)


@pytest.mark.django_db(transaction=True)
async def test_a_request_held_by_pins_tells_the_controller_and_goes_in_once_they_go(scripts):
    """gateway.pin_guard: the held version is written where the controller counts it (and one
    converge pass is asked for: the claim), and the request re-reads the pins every round."""
    engine = f"e-{uuid.uuid4().hex[:6]}"  # no Engine row: the asked-for pass has nothing to do
    _pin(engine, "p")
    link = PinGuardLink(scripts.redis)

    async def admit(name: str) -> limits.Admission:
        admission = _admission(scripts, name)
        await admission.admit(engine, max_loras=2, held=link)
        return admission

    await admit("a")
    waiting = asyncio.create_task(admit("b"))  # a second unpinned adapter: held
    await asyncio.sleep(0.3)
    assert not waiting.done()
    assert shared_state.held_versions(engine) == {"b"}
    assert shared_state.client().exists(shared_state.held_claim_key(engine))
    engine_slots.pin_drop(engine, "p")  # the controller gave the pin up at the engine
    await asyncio.wait_for(waiting, timeout=2)
    assert shared_state.inflight_counts(engine) == {"a": 1, "b": 1}
    forget_engine(engine)


async def test_without_pins_nothing_waits(scripts):
    engine = f"e-{uuid.uuid4().hex[:6]}"
    for name in "abcdef":
        admission = _admission(scripts, name)
        await asyncio.wait_for(admission.admit(engine, max_loras=2), timeout=1)
    assert len(shared_state.inflight_counts(engine)) == 6
    forget_engine(engine)


async def test_release_gives_back_concurrency_and_in_flight_in_one_call(scripts):
    engine = f"e-{uuid.uuid4().hex[:6]}"
    name = f"v-{uuid.uuid4().hex[:6]}"
    admission = _admission(scripts, name)
    await admission.admit()  # before a load: counted, on no engine yet
    await admission.admit(engine, max_loras=2)
    redis = scripts.redis
    assert int(await redis.get(conc_key(name))) == 1
    assert shared_state.inflight_counts(engine) == {name: 1}
    # Failover: leaves the first engine, admitted on a second one, concurrency kept.
    other = engine + "-b"
    await admission.leave_engine()
    await admission.admit(other, max_loras=2)
    assert shared_state.inflight_counts(engine) == {}
    assert shared_state.inflight_counts(other) == {name: 1}
    assert int(await redis.get(conc_key(name))) == 1
    await admission.release()
    assert shared_state.inflight_counts(other) == {}
    assert int(await redis.get(conc_key(name))) == 0
    await redis.delete(conc_key(name))


async def test_the_rate_limit_counts_once_per_request_and_refuses_over_it(scripts):
    tenant_id = 10_000_000 + uuid.uuid4().int % 1_000_000
    name = f"v-{uuid.uuid4().hex[:6]}"
    engine = f"e-{uuid.uuid4().hex[:6]}"
    first = _admission(scripts, name, tenant_id=tenant_id, rpm_limit=2)
    await first.admit()
    await first.admit(engine, max_loras=2)  # the same request: not again
    second = _admission(scripts, name, tenant_id=tenant_id, rpm_limit=2)
    await second.admit(engine, max_loras=2)
    third = _admission(scripts, name, tenant_id=tenant_id, rpm_limit=2)
    with pytest.raises(GatewayError) as err:
        await third.admit(engine, max_loras=2)
    assert err.value.status == 429 and err.value.code == "rate_limit_exceeded"
    assert "retry-after" in err.value.headers
    await third.release()
    assert shared_state.inflight_counts(engine) == {name: 2}  # the refused one took no slot
    await first.release()
    await second.release()
    assert int(await scripts.redis.get(conc_key(name))) == 0
    await scripts.redis.delete(conc_key(name))


async def test_the_tenants_in_flight_cap_counts_weights_and_gives_them_back(scripts):
    """max_in_flight_requests counts sequences across replicas (one Redis key); a
    request heavier than the cap still runs when the tenant has nothing else in flight."""
    tenant = int(uuid.uuid4().int % 1_000_000) + 1_000_000
    engine = f"e-{uuid.uuid4().hex[:6]}"

    def admission(weight: int) -> limits.Admission:
        return _admission(
            scripts, f"v-{uuid.uuid4().hex[:6]}", tenant_id=tenant, in_flight_cap=3, weight=weight
        )

    first = admission(2)
    await first.admit(engine)
    second = admission(2)
    with pytest.raises(GatewayError) as refused:
        await second.admit(engine)
    assert refused.value.code == "tenant_concurrency_limit_exceeded"
    await first.release()
    await second.admit(engine)  # room again
    await second.release()
    alone = admission(5)  # heavier than the cap, nothing else in flight: it runs
    await alone.admit(engine)
    await alone.release()
    assert int(await scripts.redis.get(f"lp:gw:tflight:{tenant}") or 0) == 0
