"""Websocket consumers: authenticate before accept, check access before joining a group, and
again before passing anything on, so a revoked membership or grant stops the stream.

What a user may receive is decided by portal.live_access (which asks adapters.access); these
classes only translate between the channel layer and the socket.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from typing import Any
from urllib.parse import parse_qs

import orjson
from channels.db import database_sync_to_async

from core.events import tenant_group
from core.socket_base import PortalSocket, session_alive
from portal.live_access import (
    RECHECK_SECONDS,
    LiveScope,
    access_generation,
    may_watch_fleet,
    tenant_scope,
)
from portal.live_publisher import (
    FLEET_GROUP,
    WATCH_LEASE_SECONDS,
    WATCHED_KEY,
    metrics_group,
    watched_member,
)
from portal.live_series import fleet_catch_up, tenant_catch_up
from workers import shared_state

log = logging.getLogger(__name__)
WATCH_RENEW_SECONDS = WATCH_LEASE_SECONDS / 4  # renewed at re-checks, RECHECK_SECONDS apart
CLOSE_UNAUTHENTICATED = 4401
CLOSE_REVOKED = 4403
CLOSE_NOT_FOUND = 4404


def _watch(member: str) -> None:
    shared_state.client().zadd(WATCHED_KEY, {member: time.time() + WATCH_LEASE_SECONDS})


def _watch_all(members: list[str]) -> None:
    expiry = time.time() + WATCH_LEASE_SECONDS
    shared_state.client().zadd(WATCHED_KEY, dict.fromkeys(members, expiry))


class WatchKeeper:
    """Renews, for the whole process, the publisher's leases on the groups its live sockets
    listen to, every WATCH_RENEW_SECONDS, whether messages come or not. The sockets' own renewal
    rides on the messages they receive; a Redis that restarted empty has lost every lease, so
    the publisher sends nothing and no message would ever come to renew it: the page would stay
    open and silent until reloaded (tests/faults/test_live_sockets_redis.py)."""

    def __init__(self) -> None:
        self.members: Counter[str] = Counter()
        self.task: asyncio.Task[None] | None = None

    def add(self, member: str) -> None:
        self.members[member] += 1
        loop = asyncio.get_running_loop()
        if self.task is None or self.task.done() or self.task.get_loop() is not loop:
            self.task = loop.create_task(self.run())

    def discard(self, member: str) -> None:
        self.members[member] -= 1
        if self.members[member] <= 0:
            del self.members[member]

    async def run(self) -> None:
        while self.members:
            await asyncio.sleep(WATCH_RENEW_SECONDS)
            if not self.members:  # the last socket closed during the sleep
                return
            try:
                await asyncio.to_thread(_watch_all, list(self.members))
            except Exception as exc:  # noqa: BLE001 - Redis away: the next round tries again
                log.warning("live sockets: could not renew the publisher's leases: %s", exc)


watch_keeper = WatchKeeper()


class ReadOnlySocket(PortalSocket):
    """Shared by the live sockets: one group, nothing accepted from the client."""

    group: str | None = None

    async def join(self, group: str) -> None:
        self.group = group
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = None

    async def stop(self) -> None:
        """Access is gone: leave the group at once (later messages are dropped) and close."""
        await self.disconnect(CLOSE_REVOKED)
        await self.close(code=CLOSE_REVOKED)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Read-only: clients do not send anything."""

    def _authenticated_user(self) -> Any | None:
        user = self.scope.get("user")
        return user if user is not None and user.is_authenticated else None


class TenantEventsConsumer(ReadOnlySocket):
    """/ws/tenants/<slug>/events/: version status changes of one tenant, for whoever may see them
    (a user granted one adapter gets that adapter's events only). Events are rare, so access is
    decided again from the database for each one."""

    live: LiveScope | None = None

    async def connect(self) -> None:
        user = self._authenticated_user()
        if user is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.live = await self._scope(user)
        if self.live is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.join(tenant_group(self.live.tenant_id))

    @database_sync_to_async
    def _scope(self, user: Any) -> LiveScope | None:
        if not session_alive(self.scope.get("session")):
            return None
        return tenant_scope(user=user, tenant=self.scope["url_route"]["kwargs"]["tenant"])

    async def portal_event(self, message: dict) -> None:
        if self.group is None:
            return
        self.live = await self._scope(self.scope["user"])
        if self.live is None:
            await self.stop()
            return
        event = message["event"]
        adapter = str(event.get("version", "")).rpartition("@")[0]
        if self.live.allows(adapter):
            await self.send_json(event)


class LiveNumbersSocket(ReadOnlySocket):
    """A socket fed by portal.live_publisher on the `live` channel layer (pub/sub): access
    decided at connect, and again when the publisher's access generation for this socket moved
    or RECHECK_SECONDS passed (portal.live_access)."""

    channel_layer_alias = "live"
    decision: Any = None  # what the user may receive; falsy: nothing
    checked_gen: str = ""
    recheck_at: float = 0.0
    rechecking: asyncio.Task[bool] | None = None
    watched_at: float = 0.0
    kept_member: str | None = None  # renewed by watch_keeper while this socket is open

    def decide(self, user: Any) -> Any:
        raise NotImplementedError

    def generation_tenant(self) -> str | None:
        """The tenant whose generation this socket follows; None: the global one only."""
        return None

    def group_for(self, decision: Any) -> tuple[str, str]:
        """(channel layer group, member of the publisher's watched set)."""
        raise NotImplementedError

    def catch_up(self, decision: Any, *, since: int, now: float) -> dict[str, Any]:
        """The seconds after `since` in the publisher's message shape (sync: reads Redis)."""
        raise NotImplementedError

    def since(self) -> int | None:
        """The last second the page has (`?since=`): the socket first sends what came after,
        so nothing recorded before it joined, or while it was reconnecting, is missed."""
        raw = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("since")
        if not raw or not raw[0].isdigit() or len(raw[0]) > 12:
            return None
        return int(raw[0])

    @database_sync_to_async
    def _decide(self, user: Any, *, watch: bool) -> tuple[str, Any]:
        # The generation is read before deciding: a change after this read bumps it again.
        gen = access_generation(tenant=self.generation_tenant())
        decision = self.decide(user) if session_alive(self.scope.get("session")) else None
        if decision and watch:
            _watch(self.group_for(decision)[1])
        return gen, decision

    def _schedule_recheck(self, now: float, *, first: bool = False) -> None:
        # The first periodic re-check falls at a random phase of the period: sockets opened in
        # the same second (a deploy, a reconnect storm) would otherwise all ask in one second.
        self.recheck_at = now + RECHECK_SECONDS * (random.random() if first else 1.0)

    async def connect(self) -> None:
        user = self._authenticated_user()
        if user is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.checked_gen, self.decision = await self._decide(user, watch=True)
        if not self.decision:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.watched_at = time.monotonic()
        self._schedule_recheck(self.watched_at, first=True)
        group, member = self.group_for(self.decision)
        await self.join(group)
        if self.counted_user is not None:  # accepted (not refused over the per-user cap)
            self.kept_member = member
            watch_keeper.add(member)
            await self.send_catch_up()

    async def send_catch_up(self) -> None:
        # After joining the group: whatever is recorded from here on comes from the publisher,
        # and what came before is read now; a second in both is replaced by the page, not added.
        since = self.since()
        if since is None:
            return
        try:
            payload = await database_sync_to_async(self.catch_up)(
                self.decision, since=since, now=time.time()
            )
        except Exception as exc:  # noqa: BLE001 - Redis away: the publisher's seconds still come
            log.warning("live socket: could not read the seconds it missed: %s", exc)
            return
        await self.send(text_data=self.shape_text(orjson.dumps(payload).decode()))

    async def live_metrics(self, message: dict) -> None:
        if self.group is None:
            return
        now = time.monotonic()
        if message["gen"] != self.checked_gen:
            # A known change (a membership, grant, user or log-out): decide before passing on.
            self.checked_gen = message["gen"]
            if not await self._recheck(now):
                return
        elif now >= self.recheck_at and self.rechecking is None:
            # The periodic safety net (changes made without signals): decided beside the stream,
            # so this message does not wait for the database; a refusal stops the next one.
            self._schedule_recheck(now)
            self.rechecking = asyncio.create_task(self._recheck(now))
            self.rechecking.add_done_callback(self._rechecked)
        await self.send(text_data=self.shape_text(message["text"]))

    async def _recheck(self, now: float) -> bool:
        # Renew the publisher's lease on this group at every periodic re-check (each at most
        # RECHECK_SECONDS + 1 s apart, well inside the lease): a lapsed lease stops the messages
        # that drive these re-checks, so it must never lapse while a socket listens.
        watch = now - self.watched_at > WATCH_RENEW_SECONDS
        _, self.decision = await self._decide(self.scope["user"], watch=watch)
        self._schedule_recheck(now)
        if watch:
            self.watched_at = now
        if not self.decision:
            await self.stop()
            return False
        return True

    def _rechecked(self, task: asyncio.Task[bool]) -> None:
        self.rechecking = None
        if not task.cancelled() and task.exception() is not None:
            log.error("live socket re-check failed", exc_info=task.exception())

    async def disconnect(self, code: int) -> None:
        # Not when the re-check itself found access gone and is closing the socket.
        if self.rechecking is not None and self.rechecking is not asyncio.current_task():
            self.rechecking.cancel()
        if self.kept_member is not None:
            watch_keeper.discard(self.kept_member)
            self.kept_member = None
        await super().disconnect(code)

    def shape_text(self, text: str) -> str:
        """The publisher's JSON as this socket may pass it on: as it is unless shape() filters."""
        return text


class LiveMetricsConsumer(LiveNumbersSocket):
    """/ws/tenants/<slug>/metrics/: per-second numbers of the tenant's adapter versions, at most
    one message a second, filtered to the adapters the user may see."""

    decision: LiveScope | None = None

    def decide(self, user: Any) -> LiveScope | None:
        return tenant_scope(user=user, tenant=self.scope["url_route"]["kwargs"]["tenant"])

    def group_for(self, decision: LiveScope) -> tuple[str, str]:
        return (
            metrics_group(decision.tenant_id),
            watched_member(tenant_id=decision.tenant_id, tenant=decision.tenant),
        )

    def shape_text(self, text: str) -> str:
        assert self.decision is not None
        if self.decision.adapters is None:
            return text
        return orjson.dumps(self.shape(orjson.loads(text))).decode()

    def generation_tenant(self) -> str | None:
        return str(self.scope["url_route"]["kwargs"]["tenant"])

    def catch_up(self, decision: LiveScope, *, since: int, now: float) -> dict[str, Any]:
        return tenant_catch_up(tenant=decision.tenant, since=since, now=now)

    def shape(self, payload: dict[str, Any]) -> dict[str, Any]:
        assert self.decision is not None
        if self.decision.adapters is None:
            return payload
        allows = self.decision.allows
        points = [
            {
                "t": p["t"],
                "versions": {
                    v: sums for v, sums in p["versions"].items() if allows(v.rpartition("@")[0])
                },
            }
            for p in payload["points"]
        ]
        return {**payload, "points": points}


class FleetMetricsConsumer(LiveNumbersSocket):
    """/ws/fleet/metrics/: the whole fleet's numbers (every tenant added up), for operators."""

    def decide(self, user: Any) -> bool:
        return may_watch_fleet(user=user)

    def group_for(self, decision: bool) -> tuple[str, str]:
        return FLEET_GROUP, FLEET_GROUP

    def catch_up(self, decision: bool, *, since: int, now: float) -> dict[str, Any]:
        return fleet_catch_up(since=since, now=now)
