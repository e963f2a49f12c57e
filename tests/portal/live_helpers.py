"""Shared by the live socket tests: a logged-in browser's headers, sockets through the full ASGI
stack (origin check, session auth, routing), and a publisher on the real Redis channel layer."""

from __future__ import annotations

import random

from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from redis import asyncio as aioredis

from portal.asgi import application
from portal.live_publisher import MetricsPublisher

ORIGIN = (b"origin", b"http://testserver")


def session_headers(user, *, origin: tuple[bytes, bytes] = ORIGIN) -> list[tuple[bytes, bytes]]:
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return [(b"cookie", f"sessionid={session.session_key}".encode()), origin]


async def open_socket(path: str, headers: list[tuple[bytes, bytes]]):
    """A socket through the full stack: (communicator, connected, close code). A refused one is
    ended here, as a server ends it (websocket.disconnect), so no consumer outlives its test: a
    consumer on the Redis layer left to the event loop's close can hold that close forever."""
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=5)
    if not connected:
        await communicator.disconnect()
    return communicator, connected, code


def past_second() -> int:
    """A second long past, different in every test, so the recorder's hashes and the publisher's
    per-second claims of concurrent test runs never meet."""
    return 1_000_000_000 + random.randrange(10**8)


def publisher() -> tuple[MetricsPublisher, aioredis.Redis]:
    redis = aioredis.Redis.from_url(settings.REDIS_URL)
    return MetricsPublisher(redis=redis, layer=get_channel_layer("live")), redis
