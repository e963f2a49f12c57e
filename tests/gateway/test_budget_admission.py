"""Budgets in the admission script, against the real Redis and PostgreSQL: concurrent requests
never together settle more than a budget holds; a settle is persisted before it reaches Redis; a
Redis that lost the counts refuses (503 budget_unavailable) until they are rebuilt from the
persisted spend, never from zero; a window starts again at its boundary (the budgets' clock); a
request reaped while its replica lived is counted once, at its worst case."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from redis import asyncio as aioredis

from budgets.models import Budget, BudgetSpend
from budgets.rebuild import rebuild_counts
from budgets.rules import UNWEIGHTED, BudgetRule
from gateway import limits
from gateway.budgets import BudgetClaim, Spans, _Settle
from gateway.errors import GatewayError
from gateway.replicas import ReplicaLease
from gateway.routes import Target
from tenants.models import Tenant
from workers import shared_state
from workers.redis_contract.keys import (
    BUDGETS_READY,
    BUDGETS_REAPED,
    REPLICAS,
    budget_key,
    lease_key,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _target(tenant_id: int) -> Target:
    return Target(
        served_name=f"budget-test-{tenant_id}",
        version_id=1,
        tenant_id=tenant_id,
        tenant="acme",
        adapter="a",
        number=1,
        pool="shared",
        base_model_id=1,
        rank=8,
        max_concurrent=0,
    )


def _rule(budget: Budget) -> BudgetRule:
    return BudgetRule(
        id=budget.id,
        tenant_id=budget.tenant_id,
        scope=budget.scope,
        tokens=budget.tokens,
        window=budget.window,
        time_zone=budget.tenant.time_zone,
    )


def _claim(budget: Budget, worst: int, at: datetime) -> BudgetClaim:
    rule = _rule(budget)
    return BudgetClaim(
        rules=(rule,),
        spans=(Spans().of(rule, at),),
        worst=worst,
        weights=UNWEIGHTED,
        now=at.timestamp(),
        prompt_bound=10,
    )


def _admission(scripts, budget: Budget, claim: BudgetClaim) -> limits.Admission:
    return limits.Admission(
        scripts,
        limits.Terms(
            tenant_id=budget.tenant_id, rpm_limit=0, target=_target(budget.tenant_id), requested="a"
        ),
        claim,
    )


def _counts(budget: Budget, claim: BudgetClaim) -> tuple[int, int]:
    raw = shared_state.client().hmget(claim.keys[0], ["used", "reserved"])
    return int(raw[0] or 0), int(raw[1] or 0)


@pytest.fixture
def budget():
    tenant = Tenant.objects.create(slug="budgeted", name="Budgeted")
    shared_state.client().delete(BUDGETS_READY)
    made = Budget.objects.create(tenant=tenant, scope="tenant", tokens=3000, window="day")
    assert rebuild_counts() == 1
    yield made
    client = shared_state.client()
    client.delete(BUDGETS_READY, *client.keys(budget_key(made.id, 0).rsplit(":", 1)[0] + ":*"))


async def test_concurrent_requests_never_settle_more_than_the_budget(scripts, budget):
    now = datetime.now(UTC)
    rng = random.Random(34)
    admitted, refused = [], []

    async def one(i: int) -> None:
        max_tokens = rng.choice([50, 200, 400, 800])
        claim = _claim(budget, 10 + max_tokens, now)
        admission = _admission(scripts, budget, claim)
        try:
            await admission.admit()
        except GatewayError as err:
            assert err.status == 429 and err.code == "budget_exceeded"
            assert "scope 'tenant'" in err.message
            assert int(err.headers["retry-after"]) >= 1
            assert err.headers["x-budget-limit"] == "3000"
            refused.append(claim.worst)
            return
        assert claim.headers()["x-budget-limit"] == "3000"
        admitted.append(claim.worst)
        await asyncio.sleep(rng.random() / 50)  # the engine's turn
        claim.delivered_tokens(rng.randint(1, 10), rng.randint(0, max_tokens))
        await admission.release()

    await asyncio.gather(*(one(i) for i in range(64)))
    await scripts.budgets.flush()
    assert admitted and refused
    used, reserved = await asyncio.to_thread(_counts, budget, _claim(budget, 1, now))
    assert reserved == 0 and 0 < used <= budget.tokens
    persisted = await asyncio.to_thread(lambda: BudgetSpend.objects.get(budget=budget).tokens)
    assert persisted == used  # persisted first, the same amount


async def test_a_redis_that_lost_the_counts_refuses_until_they_are_rebuilt(scripts, budget):
    now = datetime.now(UTC)
    claim = _claim(budget, 2000, now)
    admission = _admission(scripts, budget, claim)
    await admission.admit()
    claim.delivered_tokens(100, 1900)
    await admission.release()
    await scripts.budgets.flush()

    # Redis restarted empty: every count gone, the ready marker too.
    client = shared_state.client()
    client.delete(claim.keys[0], BUDGETS_READY)
    with pytest.raises(GatewayError) as refusal:
        await _admission(scripts, budget, _claim(budget, 10, now)).admit()
    assert refusal.value.status == 503 and refusal.value.code == "budget_unavailable"

    # The refusal started the rebuild (the lease beat would too).
    assert scripts.budgets.rebuilding is not None
    assert await scripts.budgets.rebuilding == 1
    used, _ = await asyncio.to_thread(_counts, budget, claim)
    assert used == 2000  # from the persisted spend, not from zero
    with pytest.raises(GatewayError) as over:
        await _admission(scripts, budget, _claim(budget, 1001, now)).admit()
    assert over.value.code == "budget_exceeded"
    fits = _admission(scripts, budget, _claim(budget, 1000, now))
    await fits.admit()
    await fits.release()
    await scripts.budgets.flush()


async def test_the_window_starts_again_at_the_tenants_midnight(scripts, budget):
    budget.tenant.time_zone = "Asia/Tokyo"
    await asyncio.to_thread(budget.tenant.save)
    # 14:59:59 UTC is 23:59:59 in Tokyo; one second later is the next day there.
    before = datetime.now(UTC).replace(hour=14, minute=59, second=59, microsecond=0)
    after = before + timedelta(seconds=1)
    full = _claim(budget, 3000, before)
    admission = _admission(scripts, budget, full)
    await admission.admit()
    full.delivered_tokens(0, 3000)
    await admission.release()
    await scripts.budgets.flush()
    with pytest.raises(GatewayError) as refusal:
        await _admission(scripts, budget, _claim(budget, 1, before)).admit()
    assert refusal.value.headers["retry-after"] == "1"
    nextday = _claim(budget, 3000, after)
    assert nextday.keys[0] != full.keys[0]
    assert nextday.keys[0] == budget_key(budget.id, int(after.timestamp()))
    admitted = _admission(scripts, budget, nextday)
    await admitted.admit()
    assert nextday.remaining == 0
    await admitted.release()
    await scripts.budgets.flush()


async def test_two_flushes_at_once_persist_and_settle_each_request_once(scripts, budget):
    """The settle loop and the lease beat's rebuild both flush; at once, they must not both take
    the same ended requests (their spend persisted twice, their settles sent twice)."""
    now = datetime.now(UTC)
    charged = 0
    for delivered in (40, 60):
        claim = _claim(budget, 100, now)
        admission = _admission(scripts, budget, claim)
        await admission.admit()
        claim.delivered_tokens(0, delivered)
        await admission.release()
        charged += claim.charge()
    settled = await asyncio.gather(scripts.budgets.flush(), scripts.budgets.flush())
    assert sorted(settled) == [0, 2] and not scripts.budgets.queue
    used, reserved = await asyncio.to_thread(_counts, budget, _claim(budget, 1, now))
    persisted = await asyncio.to_thread(lambda: BudgetSpend.objects.get(budget=budget).tokens)
    assert (used, reserved, persisted) == (charged, 0, charged)


async def test_requests_reaped_while_their_replica_lived_are_counted_once(scripts, budget):
    """A live replica whose lease lapsed (its event loop late) is reaped by another: its
    reservations settled at their worst case, in Redis and (through the reaper's notes) in the
    database. When its requests then end, their settles add nothing more, in either, even sent
    again; the replica's next beat brings it back."""
    now = datetime.now(UTC)
    other = limits.Scripts(aioredis.Redis.from_url(settings.REDIS_URL))
    lapsing, reaper = ReplicaLease(scripts.redis, scripts), ReplicaLease(other.redis, other)
    await lapsing.beat()
    await reaper.beat()
    ended = []
    for worst, (prompt, completion) in ((500, (10, 90)), (300, (0, 50))):
        claim = _claim(budget, worst, now)
        admission = _admission(scripts, budget, claim)
        await admission.admit()
        claim.delivered_tokens(prompt, completion)
        ended.append((admission, claim))
    assert await asyncio.to_thread(_counts, budget, ended[0][1]) == (0, 800)

    await scripts.redis.delete(lease_key(scripts.replica))  # its lease lapses
    assert await reaper.beat() >= 1  # reaped, and the worst cases persisted
    assert await asyncio.to_thread(_counts, budget, ended[0][1]) == (800, 0)

    def persisted() -> int:
        return BudgetSpend.objects.get(budget=budget).tokens

    assert await asyncio.to_thread(persisted) == 800
    await ended[0][0].release()
    assert await scripts.budgets.flush() == 1
    await lapsing.beat()  # back: its lease renewed, the reaper's notes persisted
    await ended[1][0].release()
    assert await scripts.budgets.flush() == 1
    # The same settles sent again (as if their answers had been lost).
    for admission, claim in ended:
        scripts.budgets.queue.append(_Settle(claim, admission.ledger, persisted=True))
    assert await scripts.budgets.flush() == 2
    await reaper.beat()
    assert await asyncio.to_thread(_counts, budget, ended[0][1]) == (800, 0)
    assert await asyncio.to_thread(persisted) == 800
    assert not any(int(v) for v in shared_state.client().hvals(BUDGETS_REAPED))

    for replica in (scripts.replica, other.replica):
        await scripts.redis.delete(lease_key(replica))
        await scripts.redis.srem(REPLICAS, replica)
    await other.redis.aclose()
