"""A base for the portal's websocket consumers: Channels' dispatch without its per-message hop,
a cap on the sockets one user holds open, and the session check every socket repeats.

Channels (4.2+) calls `aclose_old_connections()` before every handler, for handlers that use the
async ORM: a `sync_to_async` round trip to the one thread that runs all of a process's sync code,
for every message of every socket. Our handlers reach the database only through
`database_sync_to_async`, which closes stale connections around each call itself, so the hop
does nothing for them, and at hundreds of sockets x one message a second it queued every live
update behind one thread (bench/live_fanout.py: about a fifth of the event loop's time).
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import urlparse

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.security.websocket import AllowedHostsOriginValidator, WebsocketDenier
from django.conf import settings

from core.json_depth import loads_bounded

CLOSE_TOO_MANY = 4429
# A channel layer alias CHANNEL_LAYERS does not define: a consumer with it gets no layer
# (channels.layers.get_channel_layer answers None), so it neither makes a channel nor listens.
NO_LAYER = "no-layer"

# Sockets open per user id in this process. Per process on purpose: the cap protects the
# process's memory and file descriptors from one user's tabs or scripts, needs no Redis (so it
# holds when Redis is gone) and cannot leak counts when another process dies.
_open_per_user: Counter[int] = Counter()


class RefusedSocket(WebsocketDenier):
    """Closes a socket before accept, with no channel layer. Channels' own denier has the
    default layer: each refused socket made a channel and held a blocking Redis read
    (BZPOPMIN) until its client went away, so cross-origin attempts cost Redis reads; and a
    blocking read is where redis-py can swallow a cancellation (redis/redis-py#2028): a test's
    event loop waited 15 min on one at its close."""

    channel_layer_alias = NO_LAYER


class OriginCheck:
    """Channels' AllowedHostsOriginValidator (the same hosts and matching), refusing with
    RefusedSocket."""

    def __init__(self, application: Any) -> None:
        self.validator = AllowedHostsOriginValidator(application)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        origin = None
        for name, value in scope.get("headers", []):
            if name == b"origin":
                origin = urlparse(value.decode("latin1"))  # latin-1 decodes any bytes
        if self.validator.valid_origin(origin):
            await self.validator.application(scope, receive, send)
        else:
            await RefusedSocket()(scope, receive, send)


def session_alive(session: Any) -> bool:
    """A socket lives as long as the login it was opened with: after a log-out (the session is
    deleted) it stops, whatever the user may still see. Runs a query: call it off the loop."""
    key = getattr(session, "session_key", None)
    return bool(key) and session.exists(key)


# What a client's message may nest: the sockets' messages nest 2-3 levels.
MAX_MESSAGE_DEPTH = 32


class PortalSocket(AsyncJsonWebsocketConsumer):
    counted_user: int | None = None

    @classmethod
    async def decode_json(cls, text_data: str) -> Any:
        """A client's message, or None when it is not JSON or nests deeper than
        MAX_MESSAGE_DEPTH (json.loads raised RecursionError on 100,000 `[`: the socket died with
        a server error); each consumer refuses what is not the object it takes."""
        try:
            return loads_bounded(text_data, MAX_MESSAGE_DEPTH)
        except ValueError:
            return None

    async def accept(self, subprotocol: Any = None, headers: Any = None) -> None:
        """Accept unless this user holds PORTAL_MAX_SOCKETS_PER_USER open sockets here already
        (then close with 4429: the page says so instead of retrying at once)."""
        user_id = getattr(self.scope.get("user"), "pk", None)
        if user_id is not None:
            if _open_per_user[user_id] >= settings.PORTAL_MAX_SOCKETS_PER_USER:
                await self.close(code=CLOSE_TOO_MANY)
                return
            _open_per_user[user_id] += 1
            self.counted_user = user_id
        await super().accept(subprotocol, headers)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        if self.counted_user is not None:
            _open_per_user[self.counted_user] -= 1
            if _open_per_user[self.counted_user] <= 0:
                del _open_per_user[self.counted_user]
            self.counted_user = None
        await super().websocket_disconnect(message)

    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
