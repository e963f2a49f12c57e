"""Live metrics over Channels: who may open the sockets, what each user receives, and the
publisher's one message per second per group with the numbers the gateway's recorder wrote.
Real Redis channel layer, the full ASGI stack (origin check, session auth, routing)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from adapters.access import AccessContext
from adapters.models import Adapter
from gateway.recorder import Measurement, Recorder
from tenants.services.tenancy import adapter_grant, adapter_revoke_grants, membership_remove
from tests.other_redis_database import run_on_other_redis_database
from tests.portal.live_helpers import open_socket, past_second, publisher, session_headers

pytestmark = pytest.mark.django_db(transaction=True)

METRICS = "/ws/tenants/acme/metrics/"
FLEET = "/ws/fleet/metrics/"


def measurement(tenant: str, version: str, *, at: float, **kw) -> Measurement:
    fields: dict[str, Any] = dict(
        tenant=tenant,
        tenant_id=1,
        adapter=version.rpartition("@")[0],
        version=version,
        version_id=None,
        pool="",
        served_name="",
        engine="e",
        served_from="gpu",
        ok=True,
        ttft_ms=10.0,
        e2e_ms=20.0,
        prompt_tokens=1,
        completion_tokens=1,
        at=at,
    )
    fields.update(kw)
    return Measurement(**fields)


async def headers_for(world, name: str, **kw):
    return await sync_to_async(session_headers)(world.users[name], **kw)


@pytest.fixture
def code_style(world):
    return Adapter.objects.create(
        tenant=world.acme, name="code-style", base_model=world.base, created_by=world.users["alice"]
    )


@pytest.fixture
def grantee(world):
    """nora: no membership, a grant on acme/support only."""
    adapter_grant(
        access=AccessContext.for_user(world.users["alice"]),
        adapter=world.support,
        username="nora",
        perms=["view_adapter"],
    )
    return world.users["nora"]


# --- refusals before accept ---


async def test_anonymous_sockets_are_refused(world):
    for path in (METRICS, FLEET):
        _, connected, code = await open_socket(path, [(b"origin", b"http://testserver")])
        assert not connected and code == 4401, path


async def test_a_foreign_origin_is_refused(world):
    headers = await headers_for(world, "alice", origin=(b"origin", b"https://evil.example"))
    _, connected, _ = await open_socket(METRICS, headers)
    assert not connected
    headers = await headers_for(world, "olga", origin=(b"origin", b"https://evil.example"))
    _, connected, _ = await open_socket(FLEET, headers)
    assert not connected


async def test_a_foreign_origin_is_refused_without_listening_on_the_channel_layer(world):
    """A refused socket makes no channel and holds no Redis read while its client lingers
    (channels' own denier listened on the default layer until the client went away)."""
    from channels.testing import WebsocketCommunicator

    from portal.asgi import application

    layer = get_channel_layer()
    headers = await headers_for(world, "alice", origin=(b"origin", b"https://evil.example"))
    communicator = WebsocketCommunicator(application, METRICS, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    try:
        assert not connected
        await asyncio.sleep(0.2)  # a listener, if the refusal starts one, is running by now
        assert layer.receive_count == 0
    finally:
        await communicator.disconnect()


async def test_another_tenants_member_is_not_found(world):
    _, connected, code = await open_socket(METRICS, await headers_for(world, "charlie"))
    assert not connected and code == 4404


async def test_the_fleet_socket_is_for_operators(world):
    for name in ("alice", "vera", "charlie"):
        _, connected, code = await open_socket(FLEET, await headers_for(world, name))
        assert not connected and code == 4404, name
    socket, connected, _ = await open_socket(FLEET, await headers_for(world, "olga"))
    assert connected
    await socket.disconnect()


async def test_a_grantee_reaches_nothing_beyond_the_grant(world, grantee):
    _, connected, code = await open_socket(
        "/ws/tenants/globex/metrics/", await headers_for(world, "nora")
    )
    assert not connected and code == 4404
    _, connected, code = await open_socket(FLEET, await headers_for(world, "nora"))
    assert not connected and code == 4404


# --- what arrives ---


async def record(*measurements: Measurement) -> None:
    pub, redis = publisher()
    recorder = Recorder(redis)
    for m in measurements:
        recorder.add(m)
    await recorder.flush()
    await redis.aclose()


async def test_the_publisher_sends_each_group_once_a_second_with_the_recorded_numbers(
    world, code_style
):
    t = past_second()
    await record(
        measurement("acme", "support@1", at=t - 2 + 0.1, served_from="gpu", ttft_ms=12.0),
        measurement(
            "acme", "support@1", at=t - 2 + 0.5, served_from="cold", ttft_ms=30.0, load_ms=250.0
        ),
        measurement("acme", "support@1", at=t - 1 + 0.2, served_from="cpu", ok=False, ttft_ms=None),
        measurement("acme", "code-style@2", at=t - 1 + 0.3, served_from="gpu", ttft_ms=8.0),
        measurement("globex", "legal@1", at=t - 1 + 0.3, served_from="gpu", ttft_ms=9.0),
    )
    socket, connected, _ = await open_socket(METRICS, await headers_for(world, "vera"))
    assert connected
    pub, redis = publisher()
    first = await pub.tick(now=t + 0.05)
    again = await pub.tick(now=t + 0.6)  # same second: nothing more, from any publisher
    await redis.aclose()
    assert first is not None and again is None
    payload = await socket.receive_json_from(timeout=5)
    assert await socket.receive_nothing(timeout=0.5)
    assert payload["kind"] == "metrics" and payload["step"] == 1
    points = {p["t"]: p["versions"] for p in payload["points"]}
    assert sorted(points) == [t - 3, t - 2, t - 1]
    assert points[t - 3] == {}
    assert points[t - 2] == {
        "support@1": {
            "requests": 2,
            "gpu": 1,
            "cold": 1,
            "ttft_ms_sum": 42,
            "ttft_count": 2,
            "load_ms_sum": 250,
        }
    }
    assert points[t - 1] == {
        "support@1": {"requests": 1, "cpu": 1, "errors": 1},
        "code-style@2": {"requests": 1, "gpu": 1, "ttft_ms_sum": 8, "ttft_count": 1},
    }  # globex's numbers never reach acme's group
    await socket.disconnect()


async def test_a_grantee_receives_only_the_granted_adapters_series(world, code_style, grantee):
    t = past_second()
    await record(
        measurement("acme", "support@1", at=t - 1 + 0.1),
        measurement("acme", "code-style@1", at=t - 1 + 0.2),
    )
    socket, connected, _ = await open_socket(METRICS, await headers_for(world, "nora"))
    assert connected
    pub, redis = publisher()
    await pub.tick(now=t + 0.05)
    await redis.aclose()
    payload = await socket.receive_json_from(timeout=5)
    last = payload["points"][-1]["versions"]
    assert list(last) == ["support@1"]
    await socket.disconnect()


async def test_the_fleet_socket_adds_up_every_tenant(world):
    t = past_second()
    await record(
        measurement("acme", "support@1", at=t - 1 + 0.1, served_from="cold", load_ms=100.0),
        measurement("globex", "legal@1", at=t - 1 + 0.2, served_from="gpu"),
    )
    socket, connected, _ = await open_socket(FLEET, await headers_for(world, "olga"))
    assert connected
    pub, redis = publisher()
    await pub.tick(now=t + 0.05)
    await redis.aclose()
    payload = await socket.receive_json_from(timeout=5)
    assert payload["kind"] == "fleet-metrics"
    sums = payload["points"][-1]["sums"]
    # Other test runs may share the Redis database but not this second.
    assert sums == {
        "requests": 2,
        "gpu": 1,
        "cold": 1,
        "load_ms_sum": 100,
        "ttft_ms_sum": 20,
        "ttft_count": 2,
        "evictions": 0,
    }
    await socket.disconnect()


# --- a socket that (re)joins is first brought up to date (`?since=`, live.js) ---


async def test_a_joining_socket_first_gets_the_seconds_since_the_page_was_drawn(world, grantee):
    now = time.time()
    ours = f"joined-{uuid.uuid4().hex[:6]}@1"  # a series nobody else records
    await record(
        *(measurement("acme", ours, at=now - 4) for _ in range(3)),
        measurement("acme", "support@1", at=now - 4),
    )
    since = int(now) - 10
    socket, connected, _ = await open_socket(
        f"{METRICS}?since={since}", await headers_for(world, "vera")
    )
    assert connected
    payload = await socket.receive_json_from(timeout=5)
    await socket.disconnect()
    points = {p["t"]: p["versions"] for p in payload["points"]}
    assert payload["kind"] == "metrics" and min(points) == since + 1 and max(points) >= int(now)
    assert points[int(now) - 4][ours] == {
        "requests": 3,
        "gpu": 3,
        "ttft_ms_sum": 30,
        "ttft_count": 3,
    }

    # A grantee's catch-up is filtered as the publisher's messages are.
    socket, connected, _ = await open_socket(
        f"{METRICS}?since={since}", await headers_for(world, "nora")
    )
    assert connected
    payload = await socket.receive_json_from(timeout=5)
    await socket.disconnect()
    assert all(set(p["versions"]) <= {"support@1"} for p in payload["points"])
    assert any(p["versions"] for p in payload["points"])


async def test_the_fleet_socket_catches_up_too(world):
    now = time.time()
    await record(*(measurement(f"t-{uuid.uuid4().hex[:6]}", "x@1", at=now - 3) for _ in range(5)))
    socket, connected, _ = await open_socket(
        f"{FLEET}?since={int(now) - 5}", await headers_for(world, "olga")
    )
    assert connected
    payload = await socket.receive_json_from(timeout=5)
    await socket.disconnect()
    points = {p["t"]: p["sums"] for p in payload["points"]}
    assert payload["kind"] == "fleet-metrics"
    assert points[int(now) - 3]["requests"] >= 5 and points[int(now) - 3]["evictions"] == 0


async def test_the_fleet_socket_carries_each_engines_queue_by_class(world):
    """The engine page's live queue (static/portal/live.js): every fleet message, the
    catch-up one and the publisher's, carries each engine's slots by service class now, from the
    `class:<name>` fields every replica's admission counts in the engine's load hash."""
    from workers import shared_state
    from workers.models import Engine
    from workers.redis_contract.keys import load_key

    name = f"classes-{uuid.uuid4().hex[:6]}"
    await sync_to_async(Engine.objects.create)(
        name=name,
        base_model=world.base,
        url="http://127.0.0.1:1",
        served_model_name=world.base.name,
        adapter_root="/nonexistent",
    )
    redis = shared_state.client()
    redis.hset(load_key(name), mapping={"live": 3, "class:gold": 2, "class:bronze": 1})
    try:
        now = time.time()
        socket, connected, _ = await open_socket(
            f"{FLEET}?since={int(now) - 2}", await headers_for(world, "olga")
        )
        assert connected
        caught_up = await socket.receive_json_from(timeout=5)
        assert caught_up["classes"][name] == {"gold": 2, "bronze": 1}

        redis.hset(load_key(name), mapping={"class:gold": 5, "class:bronze": 0})
        pub, client = publisher()
        await pub.tick(now=past_second() + 0.05)
        await client.aclose()
        payload = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        assert payload["kind"] == "fleet-metrics"
        assert payload["classes"][name] == {"gold": 5, "bronze": 0}
    finally:
        redis.delete(load_key(name))


@pytest.mark.parametrize("query", ["", "?since=", "?since=abc", "?since=-5", "?since=1e9"])
async def test_without_a_valid_since_nothing_is_sent_before_the_publisher(world, query):
    socket, connected, _ = await open_socket(f"{METRICS}{query}", await headers_for(world, "vera"))
    assert connected
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


async def test_a_publisher_on_another_redis_database_never_reaches_these_sockets(world):
    """Redis pub/sub ignores the database number: another deployment (CI's other test worker)
    sharing the server sent its numbers to these sockets' group until the layer's names carried
    the database."""
    socket, connected, _ = await open_socket(METRICS, await headers_for(world, "vera"))
    assert connected
    await sync_to_async(run_on_other_redis_database)(
        "from asgiref.sync import async_to_sync\n"
        "from channels.layers import get_channel_layer\n"
        "from portal.live_publisher import metrics_group\n"
        f"async_to_sync(get_channel_layer('live').group_send)(metrics_group({world.acme.pk}),"
        " {'type': 'live.metrics', 'gen': 'other', 'text': '{\"kind\": \"other\"}'})\n"
    )
    assert await socket.receive_nothing(timeout=1)
    await socket.disconnect()


# --- revocation stops the stream ---


async def assert_closed_without_data(socket) -> None:
    out = await socket.receive_output(timeout=5)
    assert out == {"type": "websocket.close", "code": 4403}


async def test_a_revoked_membership_stops_the_stream(world):
    socket, connected, _ = await open_socket(METRICS, await headers_for(world, "vera"))
    assert connected
    pub, redis = publisher()
    t = past_second()
    await pub.tick(now=t)
    assert (await socket.receive_json_from(timeout=5))["kind"] == "metrics"

    def revoke():
        membership = world.users["vera"].memberships.get(tenant=world.acme)
        membership_remove(
            access=AccessContext.for_user(world.users["alice"]), membership=membership
        )

    await sync_to_async(revoke)()
    await pub.tick(now=t + 1)
    await redis.aclose()
    await assert_closed_without_data(socket)


async def test_a_revoked_grant_stops_the_stream(world, grantee):
    socket, connected, _ = await open_socket(METRICS, await headers_for(world, "nora"))
    assert connected
    pub, redis = publisher()
    t = past_second()
    await pub.tick(now=t)
    assert (await socket.receive_json_from(timeout=5))["kind"] == "metrics"
    await sync_to_async(adapter_revoke_grants)(
        access=AccessContext.for_user(world.users["alice"]), adapter=world.support, username="nora"
    )
    await pub.tick(now=t + 1)
    await redis.aclose()
    await assert_closed_without_data(socket)


async def test_a_deactivated_operator_stops_receiving_the_fleet(world):
    socket, connected, _ = await open_socket(FLEET, await headers_for(world, "olga"))
    assert connected
    olga = world.users["olga"]
    olga.is_active = False
    await sync_to_async(olga.save)()
    pub, redis = publisher()
    await pub.tick(now=past_second())
    await redis.aclose()
    await assert_closed_without_data(socket)


# --- lifecycle events: one mechanism, same reach ---


async def test_a_grantee_gets_lifecycle_events_of_the_granted_adapter_only(
    world, code_style, grantee
):
    socket, connected, _ = await open_socket(
        "/ws/tenants/acme/events/", await headers_for(world, "nora")
    )
    assert connected
    layer = get_channel_layer()
    group = f"tenant-{world.acme.id}.events"
    for version in ("code-style@1", "support@1"):
        event = {
            "kind": "version.status",
            "version": version,
            "from": "validating",
            "to": "validated",
        }
        await layer.group_send(group, {"type": "portal.event", "event": event})
    assert (await socket.receive_json_from(timeout=5))["version"] == "support@1"
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()


async def test_events_stop_once_the_membership_is_revoked(world):
    socket, connected, _ = await open_socket(
        "/ws/tenants/acme/events/", await headers_for(world, "vera")
    )
    assert connected

    def revoke():
        membership = world.users["vera"].memberships.get(tenant=world.acme)
        membership_remove(
            access=AccessContext.for_user(world.users["alice"]), membership=membership
        )

    await sync_to_async(revoke)()
    event = {"kind": "version.status", "version": "support@1", "from": "a", "to": "b"}
    await get_channel_layer().group_send(
        f"tenant-{world.acme.id}.events", {"type": "portal.event", "event": event}
    )
    await assert_closed_without_data(socket)


async def test_logging_out_stops_the_stream(world):
    from django.test import Client
    from django.urls import reverse

    headers = await headers_for(world, "vera")
    socket, connected, _ = await open_socket(METRICS, headers)
    assert connected
    pub, redis = publisher()
    t = past_second()
    await pub.tick(now=t)
    assert (await socket.receive_json_from(timeout=5))["kind"] == "metrics"

    def log_out():  # the browser's own log-out, with the socket's session cookie
        client = Client()
        client.cookies["sessionid"] = dict(headers)[b"cookie"].decode().split("=", 1)[1]
        assert client.post(reverse("logout")).status_code == 302

    await sync_to_async(log_out)()
    await pub.tick(now=t + 1)
    await redis.aclose()
    await assert_closed_without_data(socket)


async def test_an_idle_socket_outlives_the_redis_clients_read_timeout(world):
    """redis-py's default socket timeout (5 s) equals channels_redis' blocking pop timeout (5 s):
    an events socket with nothing to say for a few seconds crashed its consumer."""
    socket, connected, _ = await open_socket(
        "/ws/tenants/acme/events/", await headers_for(world, "vera")
    )
    assert connected
    assert await socket.receive_nothing(timeout=12, interval=0.5)
    event = {"kind": "version.status", "version": "support@1", "from": "a", "to": "b"}
    await get_channel_layer().group_send(
        f"tenant-{world.acme.id}.events", {"type": "portal.event", "event": event}
    )
    assert await socket.receive_json_from(timeout=5) == event
    await socket.disconnect()


async def test_a_change_in_another_tenant_leaves_this_tenants_sockets_alone(world, monkeypatch):
    """Per-tenant access generations: a membership changing in globex does not make acme's
    sockets ask the database again (with one generation for all, every socket of the portal
    re-checked at once on any change, a log-out included); a change in acme does."""
    from portal import consumers
    from tenants.services.tenancy import membership_set

    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 10_000.0)  # no periodic re-check here
    decided: list[str] = []
    original = consumers.LiveMetricsConsumer.decide

    def counting(self, user):
        decided.append(user.username)
        return original(self, user)

    monkeypatch.setattr(consumers.LiveMetricsConsumer, "decide", counting)
    socket, connected, _ = await open_socket(METRICS, await headers_for(world, "vera"))
    assert connected and decided == ["vera"]
    pub, redis = publisher()
    t = past_second()

    def add(tenant, username, owner):
        membership_set(
            access=AccessContext.for_user(world.users[owner]),
            tenant=tenant,
            username=username,
            role="viewer",
        )

    await sync_to_async(add)(world.globex, "nora", "charlie")
    await pub.tick(now=t)
    assert (await socket.receive_json_from(timeout=5))["kind"] == "metrics"
    assert decided == ["vera"]  # globex's change: no database round trip for acme's socket

    await sync_to_async(add)(world.acme, "nora", "alice")
    await pub.tick(now=t + 1)
    assert (await socket.receive_json_from(timeout=5))["kind"] == "metrics"
    assert decided == ["vera", "vera"]  # acme's change: asked again, still allowed
    await redis.aclose()
    await socket.disconnect()


async def test_a_change_made_without_signals_stops_the_stream_at_the_periodic_recheck(
    world, monkeypatch
):
    """The safety net: a user deactivated by a bulk update (no signal, no generation move) is
    found by the periodic re-check, which runs beside the stream: the message in hand still
    goes out, and the socket closes right after it."""
    from django.contrib.auth import get_user_model

    from portal import consumers

    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0.0)  # due on every message
    socket, connected, _ = await open_socket(METRICS, await headers_for(world, "vera"))
    assert connected
    users = get_user_model().objects
    await sync_to_async(users.filter(pk=world.users["vera"].pk).update)(is_active=False)
    pub, redis = publisher()
    await pub.tick(now=past_second())
    await redis.aclose()
    assert (await socket.receive_json_from(timeout=5))["kind"] == "metrics"
    await assert_closed_without_data(socket)


async def test_the_periodic_recheck_renews_the_publishers_lease_on_the_group(world, monkeypatch):
    """Messages drive the re-checks, and the publisher sends only to groups whose lease is
    alive: a lease left to lapse would silence a listening socket for good."""
    import time

    from portal import consumers
    from portal.live_publisher import WATCHED_KEY, watched_member
    from workers import shared_state

    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0.0)  # due on every message
    monkeypatch.setattr(consumers, "WATCH_RENEW_SECONDS", 0.0)  # renew at every re-check
    socket, connected, _ = await open_socket(METRICS, await headers_for(world, "vera"))
    assert connected
    member = watched_member(tenant_id=world.acme.id, tenant="acme")
    redis = shared_state.client()
    await sync_to_async(redis.zadd)(WATCHED_KEY, {member: time.time() + 1})  # about to lapse
    pub, aredis = publisher()
    await pub.tick(now=past_second())
    await aredis.aclose()
    assert (await socket.receive_json_from(timeout=5))["kind"] == "metrics"
    for _ in range(50):  # the re-check runs beside the stream
        score = await sync_to_async(redis.zscore)(WATCHED_KEY, member)
        if score is not None and score > time.time() + 30:
            break
        await asyncio.sleep(0.05)
    assert score is not None and score > time.time() + 30
    await socket.disconnect()


def test_a_listening_socket_renews_its_lease_well_before_it_lapses():
    from portal import consumers
    from portal.live_publisher import WATCH_LEASE_SECONDS

    # Re-checks come at most RECHECK_SECONDS + 1 s (the next message) apart; each one renews.
    assert consumers.WATCH_RENEW_SECONDS < consumers.RECHECK_SECONDS
    assert consumers.RECHECK_SECONDS + 1 < WATCH_LEASE_SECONDS / 1.5
