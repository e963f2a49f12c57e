"""Request bodies are capped before Django reads, parses or authenticates them, through the ASGI
application the server runs (portal.asgi), JSON and uploads alike."""

from __future__ import annotations

import json

import httpx
import pytest
from asgiref.sync import sync_to_async

from core.audit_models import AuditEvent
from portal.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

MiB = 1024 * 1024
TOKEN_URL = "/api/v1/auth/token/"
UPLOAD_URL = "/api/v1/tenants/acme/adapters/support/versions/"


def portal() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://testserver"
    )


def login_body(pad: int = 0) -> bytes:
    body = {"username": "alice", "password": "wrong", "scopes": ["read"], "name": "x" * pad}
    return json.dumps(body).encode()


async def test_a_json_body_over_the_cap_is_refused_before_authentication(world):
    async with portal() as client:
        response = await client.post(
            TOKEN_URL, content=login_body(2 * MiB), headers={"content-type": "application/json"}
        )
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "request.too_large" and error["details"]["limit_bytes"] == MiB
    # The password was never checked: no failed sign-in was counted or audited.
    assert not await AuditEvent.objects.filter(action="auth.login_failed").aexists()


async def test_a_chunked_body_without_length_is_counted_as_it_arrives(world):
    async def chunks():
        for _ in range(3):
            yield b"x" * (MiB // 2)

    async with portal() as client:
        response = await client.post(
            TOKEN_URL, content=chunks(), headers={"content-type": "application/json"}
        )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request.too_large"


async def test_a_body_under_the_cap_reaches_the_endpoint(world):
    async with portal() as client:
        response = await client.post(
            TOKEN_URL, content=login_body(50), headers={"content-type": "application/json"}
        )
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "auth.invalid_credentials"


def _bearer(world, who: str, scopes: list[str]) -> dict[str, str]:
    from adapters.access import AccessContext
    from tenants.services.tokens import token_issue

    issued = token_issue(access=AccessContext.for_user(world.users[who]), scopes=scopes)
    return {"authorization": f"Bearer {issued.plaintext}"}


def _session(world, who: str) -> dict[str, str]:
    from tests.portal.live_helpers import session_headers

    return {"cookie": dict(session_headers(world.users[who]))[b"cookie"].decode()}


THREE_MIB = {"adapter_model.safetensors": ("m.safetensors", b"\0" * (3 * MiB))}


async def test_uploads_keep_the_adapter_sized_cap_for_an_uploader(world, settings):
    settings.ADAPTER_MAX_MODEL_BYTES = 4 * MiB
    bob = await sync_to_async(_bearer)(world, "bob", ["read", "write"])
    async with portal() as client:
        # Larger than any JSON body may be, within an adapter's size: it reaches the view.
        within = await client.post(UPLOAD_URL, files=THREE_MIB, headers=bob)
        over = await client.post(
            UPLOAD_URL,
            files={"adapter_model.safetensors": ("m", b"\0" * (6 * MiB))},
            headers=bob,
        )
    assert within.status_code == 400, within.text  # the view's own verdict on the files
    assert over.status_code == 413
    assert over.json()["error"]["details"]["limit_bytes"] == 4 * MiB + 64 * 1024 + MiB


async def test_the_upload_page_takes_an_uploaders_session(world, settings):
    settings.ADAPTER_MAX_MODEL_BYTES = 4 * MiB
    bob = await sync_to_async(_session)(world, "bob")
    async with portal() as client:
        response = await client.post("/t/acme/a/support/upload/", files=THREE_MIB, headers=bob)
    assert response.status_code != 413, response.text


@pytest.mark.parametrize(
    ("path", "who"),
    [
        (TOKEN_URL, None),  # an anonymous multipart POST to the sign-in endpoint
        ("/login/", None),
        (UPLOAD_URL, None),  # the upload endpoint, anonymous
        ("/t/acme/a/support/upload/", None),
        (UPLOAD_URL, "vera"),  # signed in, but a viewer: may not upload here
        (UPLOAD_URL, "charlie"),  # another tenant's owner
        (UPLOAD_URL, "bob-read-only"),  # an uploader's token without the write scope
        ("/api/v1/tenants/acme/adapters/", "bob"),  # an uploader, elsewhere
    ],
)
async def test_a_large_multipart_body_needs_an_uploader_on_an_upload_endpoint(
    world, settings, path, who
):
    settings.ADAPTER_MAX_MODEL_BYTES = 4 * MiB
    headers: dict[str, str] = {}
    if who == "bob-read-only":
        headers = await sync_to_async(_bearer)(world, "bob", ["read"])
    elif who is not None:
        headers = await sync_to_async(_bearer)(world, who, ["read", "write"])
    async with portal() as client:
        response = await client.post(path, files=THREE_MIB, headers=headers)
    assert response.status_code == 413, response.text
    assert response.json()["error"]["details"]["limit_bytes"] == MiB
    assert not await AuditEvent.objects.filter(action="auth.login_failed").aexists()


async def test_a_content_length_that_is_not_a_number_is_refused():
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": TOKEN_URL,
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"-5")],
    }
    await application(scope, receive, send)
    assert sent[0]["status"] == 400
    assert json.loads(sent[1]["body"])["error"]["code"] == "request.bad_content_length"
