"""Service classes through a real gateway process and a real CPU engine, beside a second
replica (issue 46, parts 2 and 3): the second replica here is this test's own admission scripts,
holding bronze requests on the engine through the shared Redis admission, as another gateway
would. The gateway process lets a gold request through to the engine (which takes its
`priority`), and answers a bronze one `503 shed_for_capacity` at once while bronze is over its
share, then serves bronze again once the other replica's requests end."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from django.conf import settings
from redis import asyncio as aioredis

from adapters.access import AccessContext
from gateway import class_policy, limits
from tenants.models import ServiceClass
from tenants.services.tokens import token_issue
from tests.gateway.hostile_support import (
    replicas_fixture,  # noqa: F401 - fixture
    wait_for,
)
from workers import shared_state
from workers.redis_contract.keys import load_key

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
PROMPT = [{"role": "user", "content": "hi"}]


def _ask(base: str, token: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/chat/completions",
        headers={"Authorization": f"Bearer {token}"},
        json={"model": model, "messages": PROMPT, "max_tokens": 2},
        timeout=60,
    )


async def _other_replica_holds(
    engine, tenant_id: int, model: str, capacity: int, n: int, service_class: str, headroom: int = 0
) -> tuple[aioredis.Redis, list[limits.Admission]]:
    """`n` requests of `service_class` held on `engine` through the shared Redis admission, as
    another gateway replica would hold them."""
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    scripts = limits.Scripts(client)
    held = []
    for _ in range(n):
        admission = limits.Admission(
            scripts,
            limits.Terms(
                tenant_id=tenant_id,
                rpm_limit=0,
                target=None,
                requested=model,
                service_class=service_class,
                class_plans=class_policy.DEFAULT_PLANS,
                class_headroom=headroom,
            ),
        )
        await admission.admit(engine.name, max_loras=engine.max_loras, capacity=capacity)
        held.append(admission)
    return client, held


async def _release(client: aioredis.Redis, held: list[limits.Admission]) -> None:
    for admission in held:
        await admission.release()
    await client.aclose()


def test_the_shares_hold_across_replicas_through_a_real_gateway(worker_fleet, gateway_server):
    world = worker_fleet.world
    worker_fleet.b.state = "down"
    worker_fleet.b.save()  # one engine: every request meets there
    world.acme.slo_class = "gold"
    world.acme.save()
    # The migration's default classes, as a real-process test's flush leaves none.
    for name, weight, wait_ms, sheddable in (
        ("gold", 6, 10000, False),
        ("silver", 3, 5000, True),
        ("bronze", 1, 2000, True),
    ):
        ServiceClass.objects.get_or_create(
            name=name,
            defaults={"weight": weight, "max_queue_wait_ms": wait_ms, "sheddable": sheddable},
        )
    bronze_plan = ServiceClass.objects.get(name="bronze")
    bronze_plan.max_queue_wait_ms = 1  # shed as soon as it is held
    bronze_plan.save()
    engine = worker_fleet.a
    model = world.base.name
    gold_token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["inference"], tenant=world.acme
    ).plaintext
    bronze_token = token_issue(
        access=AccessContext.for_user(world.users["charlie"]),
        scopes=["inference"],
        tenant=world.globex,
    ).plaintext
    assert _ask(gateway_server, bronze_token, model).status_code == 200  # tables are fresh
    capacity = max(1, int(engine.max_num_seqs * settings.GATEWAY_ENGINE_SLOTS_FACTOR))

    loop = asyncio.new_event_loop()
    try:
        client, held = loop.run_until_complete(
            _other_replica_holds(engine, world.globex.pk, model, capacity, capacity, "bronze")
        )
        load = shared_state.client().hgetall(load_key(engine.name))
        assert int(load[b"class:bronze"]) == capacity  # the engine is full of bronze
        gold = _ask(gateway_server, gold_token, model)
        assert gold.status_code == 200, gold.text  # gold holds nothing there: in it goes
        shed = _ask(gateway_server, bronze_token, model)
        assert shed.status_code == 503, shed.text
        assert shed.json()["error"]["code"] == "shed_for_capacity"
        assert int(shed.headers["retry-after"]) >= 1

        loop.run_until_complete(_release(client, held))
    finally:
        loop.close()
    again = _ask(gateway_server, bronze_token, model)
    assert again.status_code == 200, again.text


def test_two_replicas_keep_golds_headroom_on_a_saturated_engine(worker_fleet, replicas):
    """Two gateway processes and a third replica (this test's admission scripts) on one engine:
    the third fills the engine's room for sheddable classes with silver; then a bronze request
    at one replica is shed at once (bronze holds nothing there, but the last slots are gold's),
    while a gold request at the other finds one of those slots free and is served. Once the
    silver ends, bronze is served again."""
    from tests.gateway.hostile_support import clear_gateway_counts

    clear_gateway_counts()
    world = worker_fleet.world
    worker_fleet.b.state = "down"
    worker_fleet.b.save()  # one engine: every request meets there
    world.acme.slo_class = "gold"
    world.acme.save()
    world.globex.slo_class = "bronze"
    world.globex.save()
    for name, weight, wait_ms, sheddable in (
        ("gold", 6, 10000, False),
        ("silver", 3, 5000, True),
        ("bronze", 1, 1, True),  # shed as soon as it is held
    ):
        ServiceClass.objects.update_or_create(
            name=name,
            defaults={"weight": weight, "max_queue_wait_ms": wait_ms, "sheddable": sheddable},
        )
    engine, model = worker_fleet.a, world.base.name
    gold_token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["inference"], tenant=world.acme
    ).plaintext
    bronze_token = token_issue(
        access=AccessContext.for_user(world.users["charlie"]),
        scopes=["inference"],
        tenant=world.globex,
    ).plaintext
    for base in replicas:  # both replicas' tables are fresh
        assert _ask(base, bronze_token, model).status_code == 200
    capacity = max(1, int(engine.max_num_seqs * settings.GATEWAY_ENGINE_SLOTS_FACTOR))
    headroom = settings.GATEWAY_CLASS_HEADROOM
    room = class_policy.room(
        capacity, "silver", class_policy.plans_by_name(class_policy.DEFAULT_PLANS), headroom
    )
    assert headroom > 0 and room < capacity

    loop = asyncio.new_event_loop()
    try:
        client, held = loop.run_until_complete(
            _other_replica_holds(engine, world.globex.pk, model, capacity, room, "silver", headroom)
        )
        load = shared_state.client().hgetall(load_key(engine.name))
        assert int(load[b"class:silver"]) == room and int(load[b"live"]) == room
        shed = _ask(replicas[0], bronze_token, model)
        assert shed.status_code == 503, shed.text
        assert shed.json()["error"]["code"] == "shed_for_capacity"
        assert int(shed.headers["retry-after"]) >= 1
        gold = _ask(replicas[1], gold_token, model)
        assert gold.status_code == 200, gold.text  # a headroom slot was free for it

        def holds(name: str) -> int:
            return int(shared_state.client().hget(load_key(engine.name), f"class:{name}") or 0)

        assert wait_for(lambda: holds("gold") == 0)  # released with its answer
        assert holds("bronze") == 0  # the shed request held nothing

        loop.run_until_complete(_release(client, held))
    finally:
        loop.close()
    again = _ask(replicas[0], bronze_token, model)
    assert again.status_code == 200, again.text
