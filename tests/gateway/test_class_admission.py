"""Service classes across replicas (gateway.limits, admission.lua; issue 46, part 2): a live
request of a class goes onto a saturated engine only while its class holds no more than its
weighted fair share there, counted over every replica in the engine's load hash; held back, it
waits and asks again, or is shed at once (503 `shed_for_capacity`, Retry-After) when its wait
would pass its class's bound. Against the real Redis, two Scripts as two replicas."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from gateway import class_policy, limits
from gateway.errors import GatewayError
from tests.fixtures.shared_counts import forget_engine
from workers import shared_state
from workers.redis_contract.keys import load_key, rpm_key, tenant_key

PLANS = class_policy.DEFAULT_PLANS


@pytest.fixture
async def replica_b():
    """A second replica's scripts, on its own client and ledger."""
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    yield limits.Scripts(client)
    await client.aclose()


@pytest.fixture
def engine():
    name = f"e-{uuid.uuid4().hex[:6]}"
    yield name
    forget_engine(name)


def _admission(scripts, tenant_id: int, klass: str, plans=PLANS, weight: int = 1, headroom=0):
    return limits.Admission(
        scripts,
        limits.Terms(
            tenant_id=tenant_id,
            rpm_limit=1000,
            target=None,
            requested="base",
            weight=weight,
            service_class=klass,
            class_plans=plans,
            class_headroom=headroom,
        ),
    )


def _load(engine: str) -> dict[str, int]:
    raw = shared_state.client().hgetall(load_key(engine))
    return {
        (k.decode() if isinstance(k, bytes) else k): int(v)
        for k, v in raw.items()
        if (k.decode() if isinstance(k, bytes) else k) != "drained"
    }


def _tenant() -> int:
    return int(uuid.uuid4().int % 10**6) + 5 * 10**6


async def _admit(admission: limits.Admission, engine: str, capacity: int) -> limits.Admission:
    await admission.admit(engine, max_loras=2, capacity=capacity)
    return admission


async def test_gold_goes_in_past_a_bronze_burst_on_another_replica(scripts, replica_b, engine):
    """Replica B's bronze tenant fills the engine; replica A's gold request still goes in, and
    B's next bronze one is held (here shed at once: bronze may wait 0 s), holding nothing."""
    bronze_now = (PLANS[0], PLANS[1], class_policy.ClassPlan("bronze", 1, 0.0, True))
    bronze, gold = _tenant(), _tenant()
    burst = [await _admit(_admission(replica_b, bronze, "bronze"), engine, 4) for _ in range(4)]
    assert _load(engine) == {"live": 4, "class:bronze": 4}
    first = await _admit(_admission(scripts, gold, "gold"), engine, 4)
    assert _load(engine) == {"live": 5, "class:bronze": 4, "class:gold": 1}
    rate_before = int(shared_state.client().get(rpm_key(bronze, int(time.time() // 60))) or 0)
    with pytest.raises(GatewayError) as shed:
        await _admit(_admission(replica_b, bronze, "bronze", bronze_now), engine, 4)
    assert shed.value.status == 503 and shed.value.code == "shed_for_capacity"
    assert int(shed.value.headers["retry-after"]) >= 1
    assert replica_b.class_counts.fields == {"shed:bronze": 1}
    # Refused whole: nothing of it is counted.
    assert _load(engine) == {"live": 5, "class:bronze": 4, "class:gold": 1}
    assert int(shared_state.client().get(tenant_key(bronze)) or 0) == 4
    assert int(shared_state.client().get(rpm_key(bronze, int(time.time() // 60))) or 0) == (
        rate_before
    )
    for admission in [*burst, first]:
        await admission.release()
    assert _load(engine) == {}


async def test_a_held_request_goes_in_once_its_class_is_back_within_its_share(
    scripts, replica_b, engine
):
    """Bronze may not be shed here: held, it waits (asking again) until the other replica's
    releases bring bronze back under its share, then goes in."""
    patient = (PLANS[0], PLANS[1], class_policy.ClassPlan("bronze", 1, 60.0, False))
    bronze, gold = _tenant(), _tenant()
    burst = [await _admit(_admission(replica_b, bronze, "bronze"), engine, 4) for _ in range(4)]
    golds = [await _admit(_admission(scripts, gold, "gold"), engine, 4) for _ in range(3)]
    waiting = asyncio.create_task(_admit(_admission(scripts, bronze, "bronze", patient), engine, 4))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    for admission in burst:  # bronze's burst drains on replica B
        await admission.release()
    held = await asyncio.wait_for(waiting, 10)
    assert _load(engine)["class:bronze"] == 1 and held.class_wait_s > 0
    for admission in [*golds, held]:
        await admission.release()
    assert _load(engine) == {}


async def test_a_shed_request_is_told_when_to_come_back_from_the_drain_rate(
    scripts, replica_b, engine
):
    """With the engine's drain rate known, the expected wait decides at once: bronze's excess
    over its share, drained at its share of the rate, against its 2 s bound."""
    bronze, gold = _tenant(), _tenant()
    golds = [await _admit(_admission(replica_b, gold, "gold"), engine, 7) for _ in range(7)]
    first = await _admit(_admission(scripts, bronze, "bronze"), engine, 7)  # bronze's own slot
    meter = scripts.drain(engine)
    drained = int(shared_state.client().hget(load_key(engine), "drained") or 0)
    meter.observe(drained - 1, time.monotonic() - 10.0)  # one slot freed in 10 s: 0.1 a second
    with pytest.raises(GatewayError) as shed:
        await _admit(_admission(scripts, bronze, "bronze"), engine, 7)
    # Share 1 of 7 (weights 6:1), excess 1, drained at 0.1 x 1/7 a second: 70 s > 2 s.
    assert shed.value.code == "shed_for_capacity"
    assert int(shed.value.headers["retry-after"]) >= 60
    # Gold, over its share too (7 of 8 held, share 6), is held; even with a bound of 0 s it is
    # never shed while bronze holds a slot it can take at the next release: it waits for one.
    loose_gold = (class_policy.ClassPlan("gold", 6, 0.0, True), PLANS[1], PLANS[2])
    more_gold = asyncio.create_task(
        _admit(_admission(scripts, gold, "gold", loose_gold), engine, 7)
    )
    await asyncio.sleep(0.05)
    assert not more_gold.done()
    await first.release()  # bronze's slot frees...
    await golds.pop().release()  # ...and a gold one: the engine has room again
    admitted = await asyncio.wait_for(more_gold, 10)
    for admission in [*golds, admitted]:
        await admission.release()


async def test_a_class_that_may_not_be_shed_still_waits_a_bounded_time(scripts, engine):
    """Gold over its share on an engine that never drains is answered 503 engine_busy once its
    wait reaches the cap, holding nothing."""
    shared_state.client().hset(load_key(engine), mapping={"live": 4, "class:gold": 4})
    admission = limits.Admission(
        scripts,
        limits.Terms(
            tenant_id=_tenant(),
            rpm_limit=1000,
            target=None,
            requested="base",
            service_class="gold",
            class_plans=PLANS,
            class_wait_cap_s=0.05,
        ),
    )
    with pytest.raises(GatewayError) as busy:
        await admission.admit(engine, max_loras=2, capacity=4)
    assert busy.value.status == 503 and busy.value.code == "engine_busy"
    assert _load(engine) == {"live": 4, "class:gold": 4}
    await admission.release()


@pytest.mark.parametrize(
    ("capacity", "load", "klass", "headroom"),
    [
        (8, {"bronze": 8}, "bronze", 0),
        (8, {"bronze": 8}, "gold", 0),
        (8, {"gold": 5, "bronze": 3}, "bronze", 0),
        (8, {"gold": 5, "bronze": 1}, "bronze", 0),
        (10, {"gold": 9, "silver": 1}, "silver", 0),
        (10, {"gold": 2, "silver": 5, "bronze": 3}, "silver", 0),
        (10, {"gold": 2, "silver": 5, "bronze": 3}, "gold", 0),
        (6, {"silver": 6}, "silver", 0),
        # The gold headroom: sheddable classes leave the last slots free...
        (8, {"silver": 5}, "silver", 2),
        (8, {"silver": 6}, "silver", 2),
        (8, {"silver": 6}, "bronze", 2),
        (8, {"gold": 2, "silver": 4}, "bronze", 2),
        (8, {"silver": 6}, "gold", 2),
        (8, {"gold": 1, "silver": 6}, "gold", 2),
        (8, {"gold": 6, "silver": 2}, "gold", 2),
        # ...unless gold holds more than its fair share: then they take their own share back.
        (8, {"gold": 7}, "bronze", 2),
        (8, {"gold": 6, "bronze": 1}, "silver", 2),
        (8, {"gold": 6, "silver": 2}, "silver", 2),
        (3, {"silver": 1}, "bronze", 5),
        (10, {"gold": 8, "silver": 1}, "silver", 2),
        (10, {"gold": 7, "silver": 1}, "silver", 2),
        (8, {"gold": 3, "silver": 3}, "platinum", 2),
    ],
)
async def test_the_admission_script_decides_as_the_pure_policy_does(
    scripts, engine, capacity, load, klass, headroom
):
    client = shared_state.client()
    client.hset(
        load_key(engine),
        mapping={"live": sum(load.values()), **{f"class:{c}": n for c, n in load.items()}},
    )
    expected = class_policy.may_take(
        capacity, load, klass, 1, class_policy.plans_by_name(PLANS), headroom=headroom
    )
    # Held is shed at once here (a bound of 0 s), so the script's answer shows in the outcome;
    # gold stays the class that may not be shed (the headroom is its).
    at_once = tuple(
        class_policy.ClassPlan(p.name, p.weight, 0.0, p.sheddable or headroom == 0) for p in PLANS
    )
    admission = _admission(scripts, _tenant(), klass, at_once, headroom=headroom)
    if not expected and not any(p.name == klass and p.sheddable for p in at_once):
        admission.terms.class_wait_cap_s = 0.0  # not sheddable: refused at its cap instead
    try:
        await admission.admit(engine, max_loras=2, capacity=capacity)
        went_in = True
    except GatewayError as refused:
        assert refused.code in {"shed_for_capacity", "engine_busy"}
        went_in = False
    assert went_in == expected
    await admission.release()


async def test_a_request_heavier_than_its_room_runs_alone_on_an_idle_engine(scripts, engine):
    """n=8 of silver on an 8-slot engine with gold's 2 slots kept: the script lets it in on the
    idle engine (as the pure policy does), and holds the next one while it runs."""
    plans = class_policy.plans_by_name(PLANS)
    assert class_policy.may_take(8, {}, "silver", 8, plans, headroom=2)
    first = await _admit(_admission(scripts, _tenant(), "silver", weight=8, headroom=2), engine, 8)
    assert _load(engine) == {"live": 8, "class:silver": 8}
    at_once = (PLANS[0], class_policy.ClassPlan("silver", 3, 0.0, True), PLANS[2])
    with pytest.raises(GatewayError) as shed:
        await _admit(_admission(scripts, _tenant(), "silver", at_once, headroom=2), engine, 8)
    assert shed.value.code == "shed_for_capacity"
    await first.release()
    assert _load(engine) == {}


@pytest.mark.django_db(transaction=True)
async def test_the_metrics_count_shed_and_waiting_requests_and_each_class_slots(
    scripts, replica_b, engine, world
):
    """service_class_shed, service_class_queue_seconds and service_class_slots (gateway.metrics),
    from what every replica wrote to Redis."""
    from asgiref.sync import sync_to_async

    from gateway.metrics import class_families
    from tests.gateway.recording import engine_row

    shared_state.client().delete(limits.CLASSES_KEY)
    await sync_to_async(engine_row)(world, engine, "shared")
    bronze_now = (PLANS[0], PLANS[1], class_policy.ClassPlan("bronze", 1, 0.0, True))
    patient = (PLANS[0], PLANS[1], class_policy.ClassPlan("bronze", 1, 60.0, False))
    bronze, gold = _tenant(), _tenant()
    burst = [await _admit(_admission(replica_b, bronze, "bronze"), engine, 2) for _ in range(2)]
    golds = [await _admit(_admission(scripts, gold, "gold"), engine, 2)]
    with pytest.raises(GatewayError):
        await _admit(_admission(replica_b, bronze, "bronze", bronze_now), engine, 2)
    waiting = asyncio.create_task(_admit(_admission(scripts, bronze, "bronze", patient), engine, 2))
    await asyncio.sleep(0.05)
    for admission in burst:
        await admission.release()
    held = await asyncio.wait_for(waiting, 10)
    for replica in (scripts, replica_b):  # each replica's flush loop sends what it counted
        await replica.class_counts.flush(replica.redis)
    families = {f.name: f for f in await sync_to_async(lambda: list(class_families()))()}
    shed = {s.labels["class"]: s.value for s in families["service_class_shed"].samples}
    assert shed == {"bronze": 1}
    queued = {
        (s.name, s.labels["class"]): s.value
        for s in families["service_class_queue_seconds"].samples
    }
    assert queued[("service_class_queue_seconds_count", "bronze")] == 1
    assert queued[("service_class_queue_seconds_sum", "bronze")] > 0
    slots = {
        (s.labels["engine"], s.labels["class"]): s.value
        for s in families["service_class_slots"].samples
    }
    assert slots == {(engine, "gold"): 1, (engine, "bronze"): 1}
    for admission in [*golds, held]:
        await admission.release()
