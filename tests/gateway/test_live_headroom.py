"""Live traffic first across replicas (gateway.limits, admission.lua): every request on an engine
counts in the engine's load by its lane, base-model requests too, and a background request (an
eval run's) goes in only while the engine keeps GATEWAY_LIVE_HEADROOM slots free for live ones;
otherwise it is refused at once with `held_for_live_traffic`, holding nothing (not even a
request of the tenant's rate). Against the real Redis, two admissions as two replicas would."""

from __future__ import annotations

import time
import uuid

import pytest

from gateway import limits
from gateway.errors import GatewayError
from gateway.routes import Target
from tests.fixtures.shared_counts import forget_engine
from workers import shared_state
from workers.redis_contract.keys import load_key, rpm_key, tenant_key

CAPACITY, HEADROOM = 8, 6


def _target(served_name: str) -> Target:
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
        max_concurrent=0,
    )


def _admission(scripts, tenant_id: int, *, background: bool, adapter: str = "", weight: int = 1):
    return limits.Admission(
        scripts,
        limits.Terms(
            tenant_id=tenant_id,
            rpm_limit=1000,
            target=_target(adapter) if adapter else None,
            requested=adapter or "base",
            weight=weight,
            background=background,
            live_headroom=HEADROOM,
        ),
    )


def _load(engine: str) -> dict[str, int]:
    raw = shared_state.client().hgetall(load_key(engine))
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


def _count(key: str) -> int:
    return int(shared_state.client().get(key) or 0)


async def test_background_requests_leave_the_headroom_to_live_ones(scripts):
    engine = f"e-{uuid.uuid4().hex[:6]}"
    tenant = int(uuid.uuid4().int % 10**6) + 10**6

    async def admit(admission: limits.Admission) -> limits.Admission:
        await admission.admit(engine, max_loras=2, capacity=CAPACITY)
        return admission

    # An eval run's two requests fill what background may take (8 - 6).
    evals = [await admit(_admission(scripts, tenant, background=True, adapter="cand"))]
    evals.append(await admit(_admission(scripts, tenant, background=True)))  # its baseline: base
    assert _load(engine) == {"background": 2}
    rate_before = _count(rpm_key(tenant, int(time.time() // 60)))
    in_flight_before = _count(tenant_key(tenant))
    with pytest.raises(GatewayError) as held:
        await admit(_admission(scripts, tenant, background=True, adapter="cand"))
    assert held.value.status == 503 and held.value.code == "held_for_live_traffic"
    # Refused whole: the tenant's rate and in-flight counts are as they were.
    assert _count(rpm_key(tenant, int(time.time() // 60))) == rate_before
    assert _count(tenant_key(tenant)) == in_flight_before
    # Live requests (another replica's, base model and adapter alike) go in, up to the engine.
    live = [await admit(_admission(scripts, tenant + 1, background=False)) for _ in range(5)]
    live.append(await admit(_admission(scripts, tenant + 1, background=False, adapter="hot")))
    assert _load(engine) == {"background": 2, "live": 6}
    for admission in evals:
        await admission.release()
    # Live traffic now holds 6 of 8: no background request goes in.
    with pytest.raises(GatewayError):
        await admit(_admission(scripts, tenant, background=True))
    for admission in live[:5]:
        await admission.release()
    # One live request left: a background one fits beside it and the headroom.
    again = await admit(_admission(scripts, tenant, background=True, adapter="cand"))
    assert _load(engine) == {"background": 1, "live": 1}
    await again.release()
    await live[5].release()
    assert _load(engine) == {}
    assert shared_state.inflight_counts(engine) == {}
    forget_engine(engine)


async def test_an_idle_engine_takes_a_background_request_heavier_than_its_share(scripts):
    """With nothing in flight a background request runs, whatever it weighs (else a headroom
    as large as the engine would stop every eval run for good); it moves engines cleanly."""
    engine, other = f"e-{uuid.uuid4().hex[:6]}", f"e-{uuid.uuid4().hex[:6]}"
    tenant = int(uuid.uuid4().int % 10**6) + 3 * 10**6
    heavy = _admission(scripts, tenant, background=True, weight=4)
    await heavy.admit(engine, max_loras=2, capacity=CAPACITY)
    assert _load(engine) == {"background": 4}
    await heavy.leave_engine()  # e.g. the engine failed before the first byte: to the next
    assert _load(engine) == {}
    await heavy.admit(other, max_loras=2, capacity=CAPACITY)
    assert _load(other) == {"background": 4}
    await heavy.release()
    assert _load(other) == {} and _count(tenant_key(tenant)) == 0
    forget_engine(engine)
    forget_engine(other)
