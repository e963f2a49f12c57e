"""Live and background requests keep apart (gateway.lanes, docs/decisions/0012): a replica reads
where background sequences run from the engines' load hashes in the real Redis (another
process's admission, as an eval runner's would be), and its next live request goes to the engine
without them, while a background request packs onto that engine; a count stays seen for a moment
after it ends, then not."""

from __future__ import annotations

import asyncio
import uuid

from gateway import lanes, limits
from gateway.app import Gateway
from gateway.request import GatewayRequest
from gateway.routes import Route, RouteTable
from tests.fixtures.shared_counts import forget_engine
from tests.gateway.inprocess import gw_fixture  # noqa: F401 - fixture
from tests.gateway.inprocess import tiny_engine_info as _engine
from workers import shared_state
from workers.redis_contract.keys import load_key

TENANT = 7


async def _no_reply(message):
    raise AssertionError("engine choice sends nothing")


def _request(table: RouteTable, *, background: bool) -> GatewayRequest:
    route = Route(name="tiny-llama", base_model_id=1)
    return GatewayRequest(
        "chat", {}, route, None, table, TENANT, send=_no_reply, started=0.0, background=background
    )


async def _background_admission(scripts, engine: str) -> limits.Admission:
    """An eval runner's base-model request on `engine`, as its own process admits it."""
    admission = limits.Admission(
        scripts,
        limits.Terms(
            tenant_id=TENANT + 1,
            rpm_limit=0,
            target=None,
            requested="tiny-llama",
            background=True,
            live_headroom=6,
        ),
    )
    await admission.admit(engine, max_loras=2, capacity=8)
    return admission


async def test_live_requests_keep_off_the_engine_an_eval_runs_on(gw: Gateway, scripts, monkeypatch):
    # A count read stays seen for as long as the test runs, however loaded the machine (its
    # forgetting is the next test's).
    monkeypatch.setattr(lanes, "SEEN_FOR_S", 3600.0)
    prefix = f"lane-{uuid.uuid4().hex[:6]}"  # one for both: a sorts before b
    a, b = f"{prefix}-a", f"{prefix}-b"
    table = RouteTable(engines=(_engine(a), _engine(b)), pools={TENANT: "shared"})
    # Nothing in the background lane: both idle, the first by name.
    await gw.lanes.read([a, b])
    assert gw.choose(_request(table, background=False))[0].name == a
    running = await _background_admission(scripts, a)
    try:
        await gw.lanes.read([a, b])
        assert gw.lanes.background(a) == 1 and gw.lanes.background(b) == 0
        assert gw.choose(_request(table, background=False))[0].name == b
        # A background request packs onto the engine its lane runs on, b as idle as it is.
        assert gw.choose(_request(table, background=True))[0].name == a
    finally:
        await running.release()
    assert shared_state.client().hgetall(load_key(a)) == {}
    await gw.lanes.read([a, b])  # ended a moment ago: still seen, between two cases
    assert gw.choose(_request(table, background=False))[0].name == b
    forget_engine(a)
    forget_engine(b)


async def test_a_background_count_is_forgotten_once_it_has_not_been_seen_for_a_while(
    scripts, monkeypatch
):
    monkeypatch.setattr(lanes, "SEEN_FOR_S", 3600.0)
    engine = f"lane-{uuid.uuid4().hex[:6]}"
    watch = lanes.LaneWatch(scripts.redis)
    running = await _background_admission(scripts, engine)
    await watch.read([engine])
    await running.release()
    await watch.read([engine])
    assert watch.background(engine) == 1
    monkeypatch.setattr(lanes, "SEEN_FOR_S", 0.0)
    await watch.read([engine])
    assert watch.background(engine) == 0
    forget_engine(engine)


async def test_the_replica_reads_the_lanes_on_its_own(scripts, settings):
    """The loop a replica runs (started with its tables): a background admission elsewhere is
    seen without any request asking."""
    settings.GATEWAY_LANE_POLL_SECONDS = 0.02
    engine = f"lane-{uuid.uuid4().hex[:6]}"
    watch = lanes.LaneWatch(scripts.redis)
    reader = asyncio.create_task(watch.run_forever(lambda: [engine]))
    running = await _background_admission(scripts, engine)
    try:
        async with asyncio.timeout(10):
            while watch.background(engine) != 1:
                await asyncio.sleep(0.01)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await running.release()
    forget_engine(engine)


async def test_this_process_s_own_background_requests_count_before_any_read(scripts):
    watch = lanes.LaneWatch(scripts.redis)
    with (
        watch.holding("e1", 2, background=True),
        watch.holding("e1", 1, background=True),
        watch.holding("e1", 5, background=False),  # a live request is no background one
    ):
        assert watch.background("e1") == 3
    assert watch.background("e1") == 0 and watch.own == {}
