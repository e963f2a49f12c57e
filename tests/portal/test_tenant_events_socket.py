"""The tenant events socket over the real Redis channel layer, through the full ASGI stack."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from adapters.access import AccessContext
from tests.portal.live_helpers import open_socket as connect
from tests.portal.live_helpers import session_headers as session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


async def test_anonymous_sockets_are_refused_before_accept(world):
    communicator, connected, code = await connect(
        "/ws/tenants/acme/events/", [(b"origin", b"http://testserver")]
    )
    assert not connected and code == 4401


async def test_another_tenants_socket_is_not_found(world):
    headers = await sync_to_async(session_cookie)(world.users["charlie"])
    communicator, connected, code = await connect("/ws/tenants/acme/events/", headers)
    assert not connected and code == 4404


async def test_a_foreign_origin_is_refused(world):
    headers = await sync_to_async(session_cookie)(world.users["alice"])
    headers = [h for h in headers if h[0] != b"origin"] + [(b"origin", b"https://evil.example")]
    communicator, connected, _ = await connect("/ws/tenants/acme/events/", headers)
    assert not connected


async def test_a_member_receives_version_status_changes(world, tmp_path, monkeypatch):
    from adapters.services import uploads
    from adapters.services.lifecycle import version_record_validation, version_reject
    from adapters.services.validation import version_claim_for_validation
    from tests.factories import adapter_files, upload

    monkeypatch.setattr(uploads, "_enqueue_validation", lambda version_id: None)  # no worker here

    headers = await sync_to_async(session_cookie)(world.users["vera"])
    communicator, connected, _ = await connect("/ws/tenants/acme/events/", headers)
    assert connected

    def make_and_reject():
        upload(world.client("bob"), "acme", "support", adapter_files(tmp_path / "a"))
        version = world.support.versions.get()
        version_claim_for_validation(version_id=version.pk)
        version = version_record_validation(
            version=version, report={"valid": True, "errors": []}, fields={}
        )
        version_reject(
            version=version, access=AccessContext.for_user(world.users["rita"]), reason="test"
        )

    await sync_to_async(make_and_reject)()
    claimed = await communicator.receive_json_from(timeout=5)
    first = await communicator.receive_json_from(timeout=5)
    second = await communicator.receive_json_from(timeout=5)
    # The validator's claim shows too (live validation progress on the version page).
    assert claimed == {
        "kind": "version.status",
        "version": "support@1",
        "from": "uploaded",
        "to": "validating",
    }
    assert first == {
        "kind": "version.status",
        "version": "support@1",
        "from": "validating",
        "to": "validated",
    }
    assert second["to"] == "rejected"
    await communicator.disconnect()
