"""A base for the portal's websocket consumers: Channels' dispatch without its per-message hop.

Channels (4.2+) calls `aclose_old_connections()` before every handler, for handlers that use the
async ORM: a `sync_to_async` round trip to the one thread that runs all of a process's sync code,
for every message of every socket. Our handlers reach the database only through
`database_sync_to_async`, which closes stale connections around each call itself, so the hop
does nothing for them, and at hundreds of sockets x one message a second it queued every live
update behind one thread (bench/live_fanout.py: about a fifth of the event loop's time).
"""

from __future__ import annotations

from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer


class PortalSocket(AsyncJsonWebsocketConsumer):
    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
