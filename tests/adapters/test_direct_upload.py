"""Direct-to-S3 uploads through the API against the moto server: parts PUT with httpx straight to
presigned URLs, then a completion the portal verifies; every failure leaves nothing behind."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from adapters.access import AccessContext
from adapters.models import AdapterVersion, DirectUpload
from adapters.services.direct_uploads import expire_direct_uploads
from core.audit_models import AuditEvent
from portal.audit_verify import verify_chain
from tenants.services.tenancy import adapter_grant
from tests.factories import adapter_files, make_user
from tests.storage.probes import leftovers

pytestmark = pytest.mark.s3
MiB = 1024 * 1024
UPLOADS = "/api/v1/tenants/{}/adapters/{}/uploads/"


def model_bytes(size: int, seed: int = 1) -> bytes:
    """A real small adapter's weights padded to `size` (only the upload path sees them here)."""
    import random

    return random.Random(seed).randbytes(size)


def start(
    client,
    *,
    model_size: int,
    config: str = '{"peft_type": "LORA"}',
    part_size: int | None = None,
    tenant: str = "acme",
    adapter: str = "support",
):
    body = {"model_size": model_size, "config": config}
    if part_size:
        body["part_size"] = part_size
    return client.post(UPLOADS.format(tenant, adapter), body, format="json")


def put_parts(started: dict, data: bytes, *, skip: tuple[int, ...] = ()) -> list[dict]:
    parts = []
    for part in started["parts"]:
        offset = (part["part_number"] - 1) * started["part_size"]
        chunk = data[offset : offset + part["size"]]
        if part["part_number"] in skip:
            continue
        response = httpx.put(part["url"], content=chunk, timeout=60)
        assert response.status_code == 200, response.text
        parts.append({"part_number": part["part_number"], "etag": response.headers["ETag"]})
    return parts


def complete(client, started: dict, parts: list[dict], **extra):
    url = UPLOADS.format(started["tenant"], started["adapter"]) + started["upload"] + "/complete/"
    return client.post(url, {"parts": parts, **extra}, format="json")


def nothing_left(storage) -> None:
    assert leftovers(storage) == []
    assert not DirectUpload.objects.exists()
    assert not AdapterVersion.objects.exists()


def actions() -> list[str]:
    return list(AuditEvent.objects.order_by("id").values_list("action", flat=True))


def test_a_large_adapter_goes_straight_to_s3_and_becomes_a_version(world, s3_backend, tmp_path):
    files = adapter_files(tmp_path / "a", rank=16)
    config_text = (files / "adapter_config.json").read_text()
    model = (files / "adapter_model.safetensors").read_bytes()
    data = model + b"\0" * (11 * MiB - len(model))  # three parts of 5 MiB, the last one short
    client = world.client("bob")

    response = start(client, model_size=len(data), config=config_text, part_size=5 * MiB)
    assert response.status_code == 201, response.json()
    started = response.json()
    assert started["part_count"] == 3 and [p["size"] for p in started["parts"]] == [
        5 * MiB,
        5 * MiB,
        MiB,
    ]
    assert started["started_by"] == "bob" and started["state"] == "pending"
    assert started["config_sha256"] == hashlib.sha256(config_text.encode()).hexdigest()
    pending = DirectUpload.objects.get(public_id=started["upload"])
    assert pending.tenant == world.acme and pending.started_by == world.users["bob"]
    assert pending.expires_at > timezone.now()

    parts = put_parts(started, data)
    done = complete(client, started, list(reversed(parts)), sha256=hashlib.sha256(data).hexdigest())
    assert done.status_code == 201, done.json()
    version = AdapterVersion.objects.get(adapter=world.support)
    assert done.json()["number"] == version.number == 1 and version.status == "uploaded"
    manifest = {f["name"]: f for f in version.manifest}
    assert manifest["adapter_model.safetensors"] == {
        "name": "adapter_model.safetensors",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert (
        manifest["adapter_config.json"]["sha256"]
        == hashlib.sha256(config_text.encode()).hexdigest()
    )
    assert version.uploaded_by == world.users["bob"]
    assert sorted(leftovers(s3_backend)) == sorted(version.quarantine_keys.values())
    assert not DirectUpload.objects.exists()
    assert actions()[-2:] == ["upload.start", "version.upload"]
    upload_event = AuditEvent.objects.get(action="version.upload")
    assert (upload_event.after or {})["direct_upload"] == started["upload"]
    assert verify_chain().ok


def test_the_config_may_come_as_a_multipart_file(world, s3_backend, tmp_path):
    files = adapter_files(tmp_path / "a")
    with open(files / "adapter_config.json", "rb") as config:
        response = world.client("bob").post(
            UPLOADS.format("acme", "support"),
            {"model_size": "123", "adapter_config": config},
            format="multipart",
        )
    assert response.status_code == 201, response.json()
    assert (
        response.json()["config_sha256"]
        == hashlib.sha256((files / "adapter_config.json").read_bytes()).hexdigest()
    )


def test_local_storage_answers_a_clear_code(world):
    response = start(world.client("bob"), model_size=10 * MiB)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "upload.direct_unavailable"
    assert not DirectUpload.objects.exists() and "upload.start" not in actions()


def test_quota_and_size_caps_are_checked_at_start(world, s3_backend, settings):
    world.acme.quota_storage_bytes = 20 * MiB
    world.acme.save()
    client = world.client("bob")
    over_quota = start(client, model_size=20 * MiB)
    assert over_quota.status_code == 413 and over_quota.json()["error"]["code"] == "quota.storage"
    settings.ADAPTER_MAX_MODEL_BYTES = 8 * MiB
    too_large = start(client, model_size=9 * MiB)
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "upload.too_large"
    bad_part = start(client, model_size=6 * MiB, part_size=MiB)
    assert (
        bad_part.status_code == 400 and bad_part.json()["error"]["code"] == "upload.bad_part_size"
    )
    nothing_left(s3_backend)
    assert "upload.start" not in actions()


def test_pending_uploads_reserve_quota(world, s3_backend):
    world.acme.quota_storage_bytes = 15 * MiB
    world.acme.save()
    client = world.client("bob")
    assert start(client, model_size=10 * MiB).status_code == 201
    second = start(client, model_size=10 * MiB)
    assert second.status_code == 413 and second.json()["error"]["code"] == "quota.storage"
    assert second.json()["error"]["details"]["reserved_bytes"] > 10 * MiB
    assert DirectUpload.objects.count() == 1


def test_quota_is_checked_again_at_completion_and_a_failure_leaves_nothing(world, s3_backend):
    client = world.client("bob")
    data = model_bytes(6 * MiB)
    started = start(client, model_size=len(data), part_size=5 * MiB).json()
    parts = put_parts(started, data)
    world.acme.quota_storage_bytes = 5 * MiB  # lowered while the parts were on their way
    world.acme.save()
    response = complete(client, started, parts)
    assert response.status_code == 413 and response.json()["error"]["code"] == "quota.storage"
    nothing_left(s3_backend)
    assert actions()[-2:] == ["upload.start", "upload.discard"]
    assert AuditEvent.objects.get(action="upload.discard").after == {"reason": "quota.storage"}


def test_a_size_cap_lowered_meanwhile_is_enforced_at_completion(world, s3_backend, settings):
    client = world.client("bob")
    data = model_bytes(6 * MiB)
    started = start(client, model_size=len(data), part_size=5 * MiB).json()
    parts = put_parts(started, data)
    settings.ADAPTER_MAX_MODEL_BYTES = 5 * MiB
    response = complete(client, started, parts)
    assert response.status_code == 413 and response.json()["error"]["code"] == "upload.too_large"
    nothing_left(s3_backend)


def test_parts_that_do_not_add_up_to_the_announced_size_are_discarded(world, s3_backend):
    # Real S3 refuses a part whose length differs from the signed one; moto does not, so a client
    # can send more (or less) here. The re-read after assembly catches it either way.
    client = world.client("bob")
    data = model_bytes(6 * MiB)
    started = start(client, model_size=len(data), part_size=5 * MiB).json()
    parts = put_parts(started, data, skip=(2,))
    last = started["parts"][1]
    etag = httpx.put(last["url"], content=data[5 * MiB :] + b"extra", timeout=60).headers["ETag"]
    response = complete(client, started, [*parts, {"part_number": 2, "etag": etag}])
    assert (
        response.status_code == 400 and response.json()["error"]["code"] == "upload.size_mismatch"
    )
    nothing_left(s3_backend)


def test_a_wrong_sha256_is_refused_and_discarded(world, s3_backend):
    client = world.client("bob")
    data = model_bytes(6 * MiB)
    started = start(client, model_size=len(data), part_size=5 * MiB).json()
    response = complete(client, started, put_parts(started, data), sha256="0" * 64)
    assert (
        response.status_code == 400 and response.json()["error"]["code"] == "upload.sha256_mismatch"
    )
    nothing_left(s3_backend)


def test_a_wrong_parts_list_keeps_the_upload_so_the_client_can_fix_it(world, s3_backend):
    client = world.client("bob")
    data = model_bytes(11 * MiB)
    started = start(client, model_size=len(data), part_size=5 * MiB).json()
    parts = put_parts(started, data, skip=(3,))
    missing = complete(client, started, parts)
    assert (
        missing.status_code == 400 and missing.json()["error"]["code"] == "upload.parts_incomplete"
    )
    never_sent = complete(client, started, [*parts, {"part_number": 3, "etag": '"abc"'}])
    assert (
        never_sent.status_code == 400
        and never_sent.json()["error"]["code"] == "upload.parts_invalid"
    )
    assert DirectUpload.objects.get().state == "pending" and not AdapterVersion.objects.exists()

    # The client sends the last part and completes.
    last = started["parts"][2]
    etag = httpx.put(last["url"], content=data[10 * MiB :], timeout=60).headers["ETag"]
    done = complete(client, started, [*parts, {"part_number": 3, "etag": etag}])
    assert done.status_code == 201, done.json()
    assert done.json()["manifest"][1]["sha256"] == hashlib.sha256(data).hexdigest()


def test_abort_removes_parts_objects_and_row(world, s3_backend):
    client = world.client("bob")
    data = model_bytes(6 * MiB)
    started = start(client, model_size=len(data), part_size=5 * MiB).json()
    put_parts(started, data, skip=(2,))
    assert leftovers(s3_backend)  # the config object and a pending multipart upload
    url = UPLOADS.format("acme", "support") + started["upload"] + "/"
    assert client.delete(url).status_code == 204
    nothing_left(s3_backend)
    assert actions()[-1] == "upload.discard"
    assert client.delete(url).status_code == 404


def test_a_pending_upload_belongs_to_who_started_it(world, s3_backend):
    started = start(world.client("bob"), model_size=6 * MiB).json()
    url = UPLOADS.format("acme", "support") + started["upload"] + "/"
    # gus holds upload rights on support through a grant, but the upload is bob's.
    gus = APIClient()
    gus.force_login(make_user("gus"))
    adapter_grant(
        access=AccessContext.for_user(world.users["alice"]),
        adapter=world.support,
        username="gus",
        perms=["upload_version"],
    )
    assert gus.get(UPLOADS.format("acme", "support")).json()["results"] == []
    for response in (
        gus.get(url),
        gus.post(url + "complete/", {"parts": [{"part_number": 1, "etag": "x"}]}, format="json"),
        gus.delete(url),
    ):
        assert (
            response.status_code == 404 and response.json()["error"]["code"] == "upload.not_found"
        )
    # The owner sees it, may abort it, but may not complete it.
    alice = world.client("alice")
    assert [
        u["upload"] for u in alice.get(UPLOADS.format("acme", "support")).json()["results"]
    ] == [started["upload"]]
    completed = alice.post(
        url + "complete/", {"parts": [{"part_number": 1, "etag": "x"}]}, format="json"
    )
    assert completed.status_code == 404
    assert alice.delete(url).status_code == 204
    nothing_left(s3_backend)


def test_viewers_and_other_tenants_cannot_start_or_see_uploads(world, s3_backend):
    started = start(world.client("bob"), model_size=6 * MiB).json()
    url = UPLOADS.format("acme", "support") + started["upload"] + "/"
    viewer = start(world.client("vera"), model_size=6 * MiB)
    assert viewer.status_code == 403 and viewer.json()["error"]["code"] == "permission.denied"
    charlie = world.client("charlie")
    for response in (
        start(charlie, model_size=6 * MiB),
        charlie.get(url),
        charlie.delete(url),
        charlie.post(
            url + "complete/", {"parts": [{"part_number": 1, "etag": "x"}]}, format="json"
        ),
    ):
        assert (
            response.status_code == 404 and response.json()["error"]["code"] == "tenant.not_found"
        )
    # charlie's own adapter path does not reach acme's upload either.
    assert (
        charlie.get(UPLOADS.format("globex", "legal") + started["upload"] + "/").status_code == 404
    )
    assert DirectUpload.objects.count() == 1


def test_retrieving_a_pending_upload_gives_fresh_urls_to_resume(world, s3_backend):
    client = world.client("bob")
    data = model_bytes(6 * MiB)
    started = start(client, model_size=len(data), part_size=5 * MiB).json()
    first = put_parts(started, data, skip=(2,))
    resumed = client.get(UPLOADS.format("acme", "support") + started["upload"] + "/").json()
    second = put_parts(resumed, data, skip=(1,))
    assert complete(client, started, first + second).status_code == 201


def test_an_expired_upload_is_refused_and_swept(world, s3_backend):
    client = world.client("bob")
    data = model_bytes(6 * MiB)
    started = start(client, model_size=len(data), part_size=5 * MiB).json()
    parts = put_parts(started, data)
    DirectUpload.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = complete(client, started, parts)
    assert response.status_code == 410 and response.json()["error"]["code"] == "upload.expired"
    nothing_left(s3_backend)

    other = start(client, model_size=len(data), part_size=5 * MiB).json()
    put_parts(other, data, skip=(2,))
    assert expire_direct_uploads() == 0  # not expired yet
    assert expire_direct_uploads(now=timezone.now() + timedelta(days=1)) == 1
    nothing_left(s3_backend)
    assert [
        (e.after or {})["reason"] for e in AuditEvent.objects.filter(action="upload.discard")
    ] == ["upload.expired"] * 2


def test_a_signature_given_at_completion_is_kept_for_validation(world, s3_backend, tmp_path):
    import base64

    client = world.client("bob")
    data = model_bytes(6 * MiB)
    started = start(client, model_size=len(data), part_size=5 * MiB).json()
    signature = base64.b64encode(b"\x01" * 64).decode()
    done = complete(client, started, put_parts(started, data), signature=signature)
    assert done.status_code == 201
    stored = AdapterVersion.objects.get().signature
    assert base64.b64decode(stored).decode() == signature
