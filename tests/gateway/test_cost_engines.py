"""The cost view's numbers against the recorded traffic of a real run: requests sent through the
gateway to a real engine, the recorder flushed, usage persisted; the cost view's requests and
tokens per tenant equal what the engine answered, its slot-seconds the gateway's own e2e sums,
and its engine-hours what the prober saw."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import openai
import pytest

from adapters.access import AccessContext
from gateway.usage import usage_key, usage_persist
from tenants.services.tokens import token_issue
from tests.factories import make_user
from tests.gateway.recording import gw_redis  # noqa: F401
from tests.workers.fleet import servable_version
from workers import shared_state
from workers.controller import converge_engine
from workers.desired import set_desired
from workers.models import EngineUptime
from workers.services.engines import engines_probe_all

pytestmark = [
    pytest.mark.engine,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("gw_redis"),
]
SENT = {"acme": ("alice", "support", 3), "globex": ("charlie", "legal", 2)}


def _chat(world, base_url: str, who: str, tenant, model: str) -> dict[str, int]:
    token = token_issue(
        access=AccessContext.for_user(world.users[who]), scopes=["inference"], tenant=tenant
    )
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=token.plaintext, max_retries=0)
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert reply.usage is not None
    return {"prompt": reply.usage.prompt_tokens, "completion": reply.usage.completion_tokens}


def _wait_for_flush(expected_requests: int, tenant_ids: set[int]) -> None:
    """The recorder flushes once a second; wait (bounded) until every request is in Redis.
    Only this test's tenants count: the suite's gateway may still flush an earlier test's
    measurements after the keys were emptied (seen: usage persisted before acme's arrived)."""
    client, key = shared_state.client(), usage_key(datetime.now(UTC).date())
    ours = tuple(f"{t}|".encode() for t in tenant_ids)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        fields: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
        counted = sum(
            int(v) for f, v in fields.items() if f.endswith(b"|requests") and f.startswith(ours)
        )
        if counted >= expected_requests:
            return
        time.sleep(0.2)
    raise AssertionError(f"the recorder flushed fewer than {expected_requests} requests")


def _settled_e2e_seconds() -> dict[str, float]:
    """Each tenant's e2e sums once the gateway has nothing left to flush: the same over two
    reads a flush period and a half apart. The suite's gateway may still flush an earlier
    test's measurements (same tenant slugs) after the keys were emptied; this test counts from
    here."""
    seen = {slug: _e2e_seconds(slug) for slug in SENT}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(1.5)  # the recorder flushes once a second
        now = {slug: _e2e_seconds(slug) for slug in SENT}
        if now == seen:
            return now
        seen = now
    raise AssertionError(f"the gateway's e2e sums kept changing: {seen}")


def _e2e_seconds(tenant: str) -> float:
    """The gateway's own per-version sums (lp:gwm:counters, integer ms per request)."""
    counters: dict[bytes, bytes] = shared_state.client().hgetall("lp:gwm:counters")  # type: ignore[assignment]
    return sum(
        (
            float(v) / 1000
            for f, v in counters.items()
            if f.startswith(f"{tenant}|".encode()) and f.endswith(b"|e2e_ms_sum")
        ),
        0.0,
    )


def test_the_cost_view_matches_the_recorded_traffic(worker_fleet, gateway_server, tmp_path):
    world = worker_fleet.world
    versions = {
        "acme": servable_version(world.support, tmp_path, seed=411),
        "globex": servable_version(world.legal, tmp_path, seed=412),
    }
    for version in versions.values():
        set_desired(
            version=version, engine=worker_fleet.a, state="registered", reason="t", converge=False
        )
    converge_engine(worker_fleet.a)
    engines_probe_all()  # the prober opens each engine's up-time stretch
    before = _settled_e2e_seconds()

    answered = {slug: {"requests": 0, "tokens": 0} for slug in SENT}
    for slug, (who, model, count) in SENT.items():
        tenant = world.acme if slug == "acme" else world.globex
        for _ in range(count):
            usage = _chat(world, gateway_server, who, tenant, model)
            answered[slug]["requests"] += 1
            answered[slug]["tokens"] += usage["prompt"] + usage["completion"]
    _wait_for_flush(sum(count for _, _, count in SENT.values()), {world.acme.id, world.globex.id})
    usage_persist()
    engines_probe_all()  # ... and extends it

    world.users["aude"] = make_user("aude", roles=("auditor",))
    body = world.client("aude").get("/api/v1/cost/").json()
    shares = {t["tenant"]: t for t in body["tenants"]}
    for slug, sent in answered.items():
        share = shares[slug]
        assert (share["requests"], share["tokens"]) == (sent["requests"], sent["tokens"])
        # Summed as floats in the usage hash, as rounded milliseconds in the counters.
        assert (
            abs(share["slot_seconds"] - (_e2e_seconds(slug) - before[slug]))
            <= 0.001 * sent["requests"] + 0.001
        ), (
            share["slot_seconds"],
            _e2e_seconds(slug),
            before[slug],
        )
        assert share["slot_seconds"] > 0
    assert shares["acme"]["share_requests"] == 0.6

    pools = {p["pool"]: p for p in body["pools"]}
    for pool, reported in pools.items():
        stretches = EngineUptime.objects.filter(pool=pool)
        seen = sum((s.last_seen_at - s.started_at).total_seconds() for s in stretches) / 3600
        assert reported["engine_hours"] == pytest.approx(seen, abs=0.002)
    assert pools[worker_fleet.a.pool]["engine_hours"] > 0
