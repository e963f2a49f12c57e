"""What the fleet keeps in Redis: in-flight counts, demand history (and the controller's
incremental per-pool tracker over it), single-flight claims, busy samples."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.fixtures.shared_counts import forget_demand
from workers import engine_slots, shared_state
from workers.cache_policy import DemandTracker
from workers.controller import pool_demand


def test_inflight_counts_never_go_negative_or_linger():
    engine = f"e-{uuid.uuid4().hex[:6]}"
    assert engine_slots.slot_enter(engine, "v", max_loras=2)
    assert engine_slots.slot_enter(engine, "v", max_loras=2)
    assert shared_state.inflight_counts(engine) == {"v": 2}
    for _ in range(3):
        engine_slots.slot_leave(engine, "v")
    assert shared_state.inflight_counts(engine) == {}


@pytest.mark.django_db  # each pass reads the tenants' business hours
def test_the_incremental_pool_tracker_equals_one_built_from_the_whole_history():
    pool = f"p-{uuid.uuid4().hex[:6]}"
    names = ["a", "b", "a", "c", "a", "b"]
    later = [False, False, True, False, False, True]  # later turns of a conversation
    for i, name in enumerate(names[:3]):
        shared_state.demand_record(pool, name, at=100.0 + i, follow_up=later[i])
    first = pool_demand(pool)
    for i, name in enumerate(names[3:], start=3):
        shared_state.demand_record(pool, name, at=100.0 + i, follow_up=later[i])
    incremental = pool_demand(pool)
    full = DemandTracker.from_history((100.0 + i, n, later[i]) for i, n in enumerate(names))
    full.advance(time.time())
    assert incremental is first  # fed the three new requests, not rebuilt
    assert incremental.shares_and_hits("abc") == full.shares_and_hits("abc")
    # the later turns are not demand: "a" started two conversations, "b" and "c" one each
    shares = full.shares_and_hits("abc")
    assert shares["a"][0] > 1.9 * shares["b"][0]
    assert shares["b"][0] == pytest.approx(shares["c"][0], rel=0.01)
    forget_demand([pool])
    assert pool_demand(pool).shares_and_hits("a") == {"a": (0.0, 0.0)}


def test_single_flight_claim_and_outcome():
    engine, name = f"e-{uuid.uuid4().hex[:6]}", "v"
    assert shared_state.load_claim(engine, name, ttl_s=5) is True
    assert shared_state.load_claim(engine, name, ttl_s=5) is False
    assert shared_state.load_outcome(engine, name) == "pending"
    shared_state.load_finish(engine, name, "ok")
    assert shared_state.load_outcome(engine, name) == "ok"


def test_a_refusal_is_published_with_its_code_and_soon_forgotten():
    engine, name = f"e-{uuid.uuid4().hex[:6]}", "v"
    assert shared_state.load_claim(engine, name, ttl_s=30)
    shared_state.load_failed(engine, name, "implicit-eviction", "CPU cache full: a:b")
    outcome = shared_state.load_outcome(engine, name)
    assert outcome is not None
    assert shared_state.load_error(outcome) == ("implicit-eviction", "CPU cache full: a:b")
    # Kept one second, not the claim's 30: a caller asking again soon claims a new load.
    assert 0 < shared_state.client().ttl(shared_state._load_key(engine, name)) <= 1


def test_busy_samples_become_intervals():
    engine = f"e-{uuid.uuid4().hex[:6]}"
    for at, count in ((10.0, 1), (40.0, 2), (70.0, 0)):
        shared_state.busy_sample(engine, count, at=at)
    assert shared_state.busy_intervals(engine, since=0) == [(30.0, 1), (30.0, 2)]
    assert shared_state.busy_intervals(engine, since=20) == [(30.0, 2)]


def test_a_request_that_waited_for_a_load_is_kept_as_such_in_the_pool_history():
    pool = f"p-{uuid.uuid4().hex[:6]}"
    shared_state.demand_record(pool, "a", at=100.0)
    shared_state.demand_record(pool, "b", at=101.0, missed=True)
    shared_state.demand_record(pool, "c", at=102.0, missed=True, follow_up=True)
    shared_state.demand_record(pool, "d", at=103.0, follow_up=True)
    assert shared_state.demand_history(pool) == [
        (100.0, "a", False, False),
        (101.0, "b", True, False),
        (102.0, "c", True, True),
        (103.0, "d", False, True),
    ]
    forget_demand([pool])


@pytest.mark.django_db
def test_the_pool_tracker_knows_a_tenant_opened_before_its_first_request(world):
    """A tenant whose business hours opened 30 s ago, busy in yesterday's hours and silent
    since: the controller's tracker gives its version most of the demand at once (yesterday's
    rate over the other tenant's), where the counts alone still say nothing."""
    import time
    from datetime import UTC, datetime, timedelta

    from adapters.models import WarmupPolicy

    now = time.time()
    opened = datetime.fromtimestamp(now - 30, tz=UTC)
    support = world.support  # acme's
    support.warmup_policy = WarmupPolicy.PRELOAD_BUSINESS_HOURS
    support.warmup_days = "*"
    support.warmup_start = opened.time().replace(second=0, microsecond=0)
    support.warmup_end = (opened + timedelta(hours=1)).time().replace(second=0, microsecond=0)
    support.warmup_timezone = "UTC"
    support.save()
    pool = f"p-{uuid.uuid4().hex[:6]}"
    acme, other = "acme--support--v1-0123abcd", "globex--legal--v1-0123abcd"
    history: list[tuple[float, str]] = []
    at = now - 86_400 - 120  # yesterday, two minutes before acme opened
    while at < now - 60:
        at += 50.0  # globex: one request every 50 s, all day
        history.append((at, other))
    at = now - 86_400 + 60  # yesterday's window, from a minute after it opened
    while at < now - 86_400 + 3000:
        at += 20.0  # acme: one every 20 s in its hours
        history.append((at, acme))
    history.sort()
    for at, name in history:
        shared_state.demand_record(pool, name, at=at)
    try:
        told = pool_demand(pool)
        blind = DemandTracker.from_history(history)
        assert blind.share(acme) < 0.1  # silent for 23 hours
        # 1/20 s against 1/50 s: 5/7 of the requests while both are open.
        assert told.share(acme) == pytest.approx(5 / 7, abs=0.1)
    finally:
        forget_demand([pool])


@pytest.mark.django_db
def test_gold_protection_is_steered_by_the_misses_the_gateway_measured(world):
    """The controller's parameters come from the same governor the simulator's `portal` runs:
    gold requests that keep waiting for loads while the others do not raise gold's priority,
    and no fixed minimum residency in seconds is left."""
    from adapters.models import AdapterVersion
    from workers.engine_view import pool_policy

    world.support.slo_class = "gold"
    world.support.save()
    pool = f"p-{uuid.uuid4().hex[:6]}"
    gold = AdapterVersion.objects.create(
        tenant=world.acme, adapter=world.support, number=1, served_name=f"{pool}-gold"
    )
    others = [f"{pool}-b{i}" for i in range(6)]  # no row: bronze
    at = 1000.0
    for _round in range(30):
        shared_state.demand_record(pool, gold.served_name, at=at, missed=True)
        for name in others:
            at += 1.0
            shared_state.demand_record(pool, name, at=at, missed=False)
    try:
        _, params = pool_policy(pool, pool_slots=3)
        assert params.rules.gold_min_residency_s == 0.0
        first = params.weights.slo_priority["gold"]
        assert first > 0.0  # boosted after one step
        _, params = pool_policy(pool, pool_slots=3)
        assert params.weights.slo_priority["gold"] > first  # gold still missing: one more step
        assert params.weights.slo_priority["bronze"] == 0.0
    finally:
        forget_demand([pool])
