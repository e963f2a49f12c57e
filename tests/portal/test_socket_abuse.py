"""Sockets cost a process memory and file descriptors: one user holds a bounded number open, and
the playground socket stops answering after its session logged out (as the live sockets do)."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from tests.gateway.playground_world import build_playground_world
from tests.portal.live_helpers import open_socket, session_headers

pytestmark = pytest.mark.django_db(transaction=True)
EVENTS = "/ws/tenants/acme/events/"
PLAYGROUND = "/ws/tenants/acme/playground/"


def log_out(headers) -> None:
    """The browser's own log-out, with the socket's session cookie."""
    client = Client()
    client.cookies["sessionid"] = dict(headers)[b"cookie"].decode().split("=", 1)[1]
    assert client.post(reverse("logout")).status_code == 302


async def test_the_playground_stops_answering_after_log_out(world):
    await sync_to_async(build_playground_world)(world)
    headers = await sync_to_async(session_headers)(world.users["bob"])
    socket, connected, _ = await open_socket(PLAYGROUND, headers)
    assert connected
    assert (await socket.receive_json_from(timeout=10))["type"] == "choices"
    await sync_to_async(log_out)(headers)
    await socket.send_json_to({"prompt": "hello", "models": ["support@1"]})
    refusal = await socket.receive_json_from(timeout=10)
    assert refusal["type"] == "error" and refusal["code"] == "auth.logged_out"
    assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}


async def test_one_user_holds_a_bounded_number_of_sockets(world, settings):
    settings.PORTAL_MAX_SOCKETS_PER_USER = 2
    vera = await sync_to_async(session_headers)(world.users["vera"])
    alice = await sync_to_async(session_headers)(world.users["alice"])
    first, ok1, _ = await open_socket(EVENTS, vera)
    second, ok2, _ = await open_socket(EVENTS, vera)
    _, ok3, code = await open_socket(EVENTS, vera)
    assert ok1 and ok2 and not ok3 and code == 4429
    # Another user is not counted against vera.
    other, ok_alice, _ = await open_socket(EVENTS, alice)
    assert ok_alice
    # A closed socket frees its place.
    await first.disconnect()
    again, ok4, _ = await open_socket(EVENTS, vera)
    assert ok4
    for socket in (second, other, again):
        await socket.disconnect()
