"""The playground socket through the full ASGI stack (origin check, session auth, routing):
every refusal, with no engine behind it. The replies themselves: test_playground_engines.py."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from gateway import playground
from portal.asgi import application
from tenants.models import Membership
from tests.gateway.inprocess import gw_fixture  # noqa: F401 - fixture
from tests.gateway.playground_world import build_playground_world
from tests.portal.test_tenant_events_socket import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)
PATH = "/ws/tenants/acme/playground/"


@pytest.fixture
def pw(world):
    return build_playground_world(world)


@pytest.fixture
def own_gateway(gw, monkeypatch):
    """The playground's gateway: the test's own (tests.gateway.inprocess), closed at its end."""
    monkeypatch.setattr(playground, "gateway_app", gw)
    return gw


async def connect(pw, who: str | None, *, origin: bytes = b"http://testserver"):
    headers = [(b"origin", origin)]
    if who is not None:
        cookie = await sync_to_async(session_cookie)(pw.world.users[who])
        headers = [h for h in cookie if h[0] != b"origin"] + headers
    communicator = WebsocketCommunicator(application, PATH, headers=headers)
    connected, code = await communicator.connect(timeout=5)
    if connected:  # the first frame: what the picker offers now
        first = await communicator.receive_json_from(timeout=10)
        assert first["type"] == "choices", first
        communicator.offered = [c["key"] for c in first["choices"]]
    return communicator, connected, code


async def ask(communicator, models, prompt="hello", **extra) -> dict:
    await communicator.send_json_to({"prompt": prompt, "models": models, **extra})
    return await communicator.receive_json_from(timeout=10)


async def test_an_anonymous_socket_is_refused_before_accept(pw):
    _, connected, code = await connect(pw, None)
    assert not connected and code == 4401


async def test_a_foreign_origin_is_refused(pw):
    _, connected, _ = await connect(pw, "bob", origin=b"https://evil.example")
    assert not connected


async def test_another_tenants_owner_is_not_found(pw):
    _, connected, code = await connect(pw, "charlie")
    assert not connected and code == 4404


@pytest.mark.parametrize("who", ["vera", "vic", "rita"])
async def test_members_and_roles_without_the_playground_are_refused(pw, who):
    _, connected, code = await connect(pw, who)
    assert not connected and code == 4403


@pytest.mark.parametrize("key", ["other@1", "support@2", "base:tiny-llama"])
async def test_a_grantee_is_refused_beyond_the_grant(pw, key):
    communicator, connected, _ = await connect(pw, "nora")
    assert connected
    assert await ask(communicator, [key]) == {"type": "start", "pane": 0, "model": key}
    refusal = await communicator.receive_json_from(timeout=10)
    assert refusal["type"] == "error" and refusal["code"] == "playground.not_found"
    await communicator.disconnect()


async def test_a_grantee_reaches_the_request_path_within_the_grant(pw, own_gateway):
    communicator, connected, _ = await connect(pw, "nora")
    assert connected
    assert (await ask(communicator, ["support@1"]))["type"] == "start"
    answer = await communicator.receive_json_from(timeout=20)
    assert answer["type"] == "error" and answer["code"] == "gateway.engine_unavailable"
    await communicator.disconnect()


async def test_a_maintainer_cannot_reach_another_tenants_version_by_its_name(pw):
    communicator, connected, _ = await connect(pw, "bob")
    assert connected
    assert (await ask(communicator, ["legal@1"]))["type"] == "start"
    refusal = await communicator.receive_json_from(timeout=10)
    assert refusal["type"] == "error" and refusal["code"] == "playground.not_found"
    await communicator.disconnect()


async def test_a_maintainers_staged_version_reaches_the_gateways_request_path(pw, own_gateway):
    # No engine is up for the tiny base model here: the request path itself answers, which a
    # refused choice never reaches.
    communicator, connected, _ = await connect(pw, "bob")
    assert connected
    assert (await ask(communicator, ["support@2"]))["type"] == "start"
    answer = await communicator.receive_json_from(timeout=20)
    assert answer["type"] == "error" and answer["code"] == "gateway.engine_unavailable"
    await communicator.disconnect()


async def test_a_revoked_membership_is_refused_on_the_next_prompt_and_closed(pw):
    communicator, connected, _ = await connect(pw, "bob")
    assert connected
    await sync_to_async(Membership.objects.filter(user=pw.world.users["bob"]).delete)()
    assert (await ask(communicator, ["support@1"]))["type"] == "start"
    refusal = await communicator.receive_json_from(timeout=10)
    assert refusal["type"] == "error" and refusal["code"] == "tenant.not_found"
    closed = await communicator.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": 4404}


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"prompt": "hi", "models": []}, "playground.bad_models"),
        ({"prompt": "hi", "models": ["a@1", "b@1", "c@1"]}, "playground.bad_models"),
        ({"prompt": "hi"}, "playground.bad_models"),
        (["not", "an", "object"], "playground.bad_message"),
    ],
)
async def test_a_malformed_message_gets_a_coded_error(pw, message, code):
    communicator, connected, _ = await connect(pw, "bob")
    assert connected
    await communicator.send_json_to(message)
    refusal = await communicator.receive_json_from(timeout=10)
    assert refusal == {"type": "error", "pane": None, "code": code, "message": refusal["message"]}
    await communicator.disconnect()


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"prompt": "  "}, "playground.empty_prompt"),
        ({"prompt": "x" * 9000}, "playground.prompt_too_long"),
        ({"max_tokens": 0}, "playground.bad_max_tokens"),
        ({"max_tokens": "many"}, "playground.bad_max_tokens"),
        ({"temperature": "hot"}, "playground.bad_temperature"),
        ({"temperature": True}, "playground.bad_temperature"),
        ({"temperature": 2.5}, "playground.bad_temperature"),
    ],
)
async def test_a_bad_prompt_gets_a_coded_error_in_its_pane(pw, extra, code):
    communicator, connected, _ = await connect(pw, "bob")
    assert connected
    assert (await ask(communicator, ["support@1"], **extra))["type"] == "start"
    refusal = await communicator.receive_json_from(timeout=10)
    assert refusal["type"] == "error" and refusal["pane"] == 0 and refusal["code"] == code
    await communicator.disconnect()


async def test_text_that_is_not_json_gets_a_coded_error(pw):
    communicator, connected, _ = await connect(pw, "bob")
    assert connected
    await communicator.send_to(text_data="{not json")
    refusal = await communicator.receive_json_from(timeout=10)
    assert refusal["code"] == "playground.bad_message"
    await communicator.disconnect()


async def test_a_maintainer_made_viewer_is_refused_on_the_next_prompt_and_closed(pw):
    communicator, connected, _ = await connect(pw, "bob")
    assert connected
    await sync_to_async(Membership.objects.filter(user=pw.world.users["bob"]).update)(role="viewer")
    assert (await ask(communicator, ["support@1"]))["type"] == "start"
    refusal = await communicator.receive_json_from(timeout=10)
    assert refusal["type"] == "error" and refusal["code"] == "playground.denied"
    closed = await communicator.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": 4403}
