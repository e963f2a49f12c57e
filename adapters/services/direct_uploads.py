"""Direct-to-S3 uploads of large model files: presigned parts, then a completion the portal checks.

start: caps and quota (counting other pending uploads), the config stored at once, a multipart
upload opened, one presigned URL per part (each part's length signed in), a pending row.
complete: the parts list is checked against the store, the object assembled, re-read to verify
its size and compute its sha256, and the version created by uploads._create_version, the same
function the streamed upload ends in. A failure after assembly, an abort or expiry removes the
objects, the multipart upload and the pending row: nothing half-made is left.
"""

from __future__ import annotations

import hashlib
import logging
import math
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from adapters.models import Adapter, AdapterVersion, DirectUpload, DirectUploadState
from adapters.services.uploads import (
    CONFIG_NAME,
    MAX_SIGNATURE_BYTES,
    MODEL_NAME,
    IncomingFile,
    _create_version,
    check_quota,
    check_sizes,
    next_number_guess,
    size_limits,
)
from adapters.storage import (
    CompletedPart,
    DirectMultipartStorage,
    MultipartError,
    StorageError,
    StoredObject,
    TooLarge,
    get_storage,
    quarantine_key,
)
from adapters.storage.streams import read_stored
from core.audit import record_event
from core.errors import ApplicationError, Conflict, NotFound
from tenants.access_port import Access
from tenants.models import Tenant

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MIN_PART_SIZE = 5 * MiB
MAX_PART_SIZE = 5 * 1024 * MiB
MAX_PARTS = 10_000
# A completion that died mid-way (process killed) may be taken over after this long.
COMPLETION_LEASE = timedelta(minutes=30)


@dataclass(frozen=True)
class PartUrl:
    part_number: int
    size: int
    url: str


def _direct_storage() -> Any:
    storage = get_storage()
    if not isinstance(storage, DirectMultipartStorage):
        raise Conflict(
            "upload.direct_unavailable",
            "Direct uploads need the S3 storage backend; this portal stores adapters on local disk. "
            "POST the files to .../versions/ (multipart) instead.",
        )
    return storage


def _part_plan(model_size: int, part_size: int | None) -> tuple[int, int]:
    if part_size is None:
        needed = math.ceil(model_size / MAX_PARTS)
        part_size = max(settings.DIRECT_UPLOAD_PART_SIZE, math.ceil(needed / MiB) * MiB)
    if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
        raise ApplicationError(
            "upload.bad_part_size",
            f"part_size must be {MIN_PART_SIZE}..{MAX_PART_SIZE} bytes, not {part_size}.",
        )
    count = math.ceil(model_size / part_size)
    if count > MAX_PARTS:
        raise ApplicationError(
            "upload.bad_part_size",
            f"{model_size} bytes in parts of {part_size} make {count} parts; S3 allows "
            f"{MAX_PARTS}. Use a part_size of at least {math.ceil(model_size / MAX_PARTS)}.",
        )
    return part_size, count


def part_urls(storage: Any, upload: DirectUpload) -> list[PartUrl]:
    """One URL per part, valid until the upload expires; each part's exact length is signed in."""
    seconds = max(1, int((upload.expires_at - timezone.now()).total_seconds()))
    urls = []
    for number in range(1, upload.part_count + 1):
        size = min(upload.part_size, upload.model_size - (number - 1) * upload.part_size)
        url = storage.presign_part(
            upload.model_key, upload.multipart_id, number, seconds, content_length=size
        )
        urls.append(PartUrl(number, size, url))
    return urls


def direct_upload_start(
    *,
    access: Access,
    adapter: Adapter,
    model_size: int,
    config: IncomingFile,
    part_size: int | None = None,
    request_id: str = "",
) -> tuple[DirectUpload, list[PartUrl]]:
    access.require_adapter(adapter, "upload_version")
    storage = _direct_storage()
    if model_size < 1:
        raise ApplicationError("upload.bad_size", "model_size must be a positive number of bytes.")
    check_sizes({CONFIG_NAME: config.size, MODEL_NAME: model_size})
    part_size, part_count = _part_plan(model_size, part_size)
    check_quota(adapter.tenant, model_size + (config.size or 0))

    tenant = adapter.tenant
    public_id = uuid.uuid4().hex
    number = next_number_guess(adapter)
    config_key = quarantine_key(tenant.slug, adapter.name, number, public_id, CONFIG_NAME)
    model_key = quarantine_key(tenant.slug, adapter.name, number, public_id, MODEL_NAME)
    prefix = config_key.rsplit("/", 1)[0] + "/"
    try:
        stored = storage.save_stream(
            config_key, config.stream, max_bytes=size_limits()[CONFIG_NAME]
        )
        multipart_id = storage.create_multipart(model_key)
        with transaction.atomic():
            locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
            check_quota(locked, model_size + stored.size)  # again, under the lock
            upload = DirectUpload.objects.create(
                public_id=public_id,
                tenant=locked,
                adapter=adapter,
                multipart_id=multipart_id,
                model_key=model_key,
                model_size=model_size,
                part_size=part_size,
                part_count=part_count,
                config_key=config_key,
                config_size=stored.size,
                config_sha256=stored.sha256,
                started_by=access.user,
                expires_at=timezone.now()
                + timedelta(seconds=settings.DIRECT_UPLOAD_EXPIRES_SECONDS),
            )
            record_event(
                action="upload.start",
                actor=access.user,
                tenant=locked,
                obj=upload,
                object_id=_object_id(upload),
                after={
                    "model_size": model_size,
                    "parts": part_count,
                    "part_size": part_size,
                    "config_sha256": stored.sha256,
                    "expires_at": upload.expires_at,
                },
                request_id=request_id,
            )
        return upload, part_urls(storage, upload)
    except BaseException as exc:
        _discard_objects(storage, prefix)
        if isinstance(exc, TooLarge):
            raise ApplicationError("upload.too_large", str(exc), status=413) from None
        if isinstance(exc, StorageError):
            raise ApplicationError(
                "upload.storage_failed",
                f"Starting the upload failed: {exc}. Nothing was kept; retry.",
                status=503,
            ) from None
        raise


def pending_uploads(*, access: Access, adapter: Adapter) -> QuerySet[DirectUpload]:
    """The caller's own pending uploads of `adapter`; a tenant owner sees everyone's."""
    qs = DirectUpload.objects.filter(adapter=adapter).select_related(
        "started_by", "adapter", "tenant"
    )
    if not access.tenant_can(adapter.tenant, "release"):
        qs = qs.filter(started_by=access.user)
    return qs


def pending_upload_get(*, access: Access, adapter: Adapter, public_id: str) -> DirectUpload:
    upload = pending_uploads(access=access, adapter=adapter).filter(public_id=public_id).first()
    if upload is None:
        raise NotFound(
            "upload.not_found",
            f"Adapter '{adapter.name}' has no pending upload '{public_id}' "
            "of yours (it may have completed, been aborted or expired).",
        )
    return upload


def _require_starter(access: Access, upload: DirectUpload) -> None:
    # The parts came from whoever holds the URLs: only they can say what they sent.
    if upload.started_by_id != access.user.pk:
        raise NotFound("upload.not_found", f"Pending upload '{upload.public_id}' is not yours.")


def direct_upload_complete(
    *,
    access: Access,
    upload: DirectUpload,
    parts: list[CompletedPart],
    signature: bytes | None = None,
    sha256: str | None = None,
    request_id: str = "",
) -> AdapterVersion:
    """Assemble, verify and turn the upload into an `uploaded` version.

    A parts list that does not match the store (a part missing, a wrong ETag) is refused with the
    upload left pending, so the client can fix it and retry; any failure after the object is
    assembled discards everything.
    """
    adapter = upload.adapter
    access.require_adapter(adapter, "upload_version")
    _require_starter(access, upload)
    storage = _direct_storage()
    if signature is not None and len(signature) > MAX_SIGNATURE_BYTES:
        raise ApplicationError(
            "upload.signature_too_large",
            f"The signature is larger than {MAX_SIGNATURE_BYTES} bytes.",
            status=413,
        )
    if upload.expires_at <= timezone.now():
        if _claim(upload):
            _discard(upload, actor=access.user, reason="upload.expired", request_id=request_id)
        raise ApplicationError(
            "upload.expired",
            "This upload expired; its parts are discarded. Start a new one.",
            status=410,
        )
    numbers = sorted(p.part_number for p in parts)
    if numbers != list(range(1, upload.part_count + 1)):
        raise ApplicationError(
            "upload.parts_incomplete",
            f"Give every part 1..{upload.part_count} exactly once with its ETag; got "
            f"{_ranges(numbers)}.",
            expected_parts=upload.part_count,
        )
    if not _claim(upload):
        raise Conflict("upload.completing", "This upload is being completed by another request.")

    try:
        try:
            storage.complete_multipart(upload.model_key, upload.multipart_id, parts)
        except MultipartError as exc:
            if exc.code == "storage.multipart_invalid":
                _release(upload)  # nothing was assembled: the client may fix the list and retry
                raise ApplicationError("upload.parts_invalid", f"{exc.message}.") from None
            if exc.code == "storage.multipart_unknown":
                raise ApplicationError(
                    "upload.expired",
                    "The store no longer knows this upload (aborted or "
                    "expired there); it was discarded. Start a new one.",
                    status=410,
                ) from None
            raise
        stored_model = _hash_stored(storage, upload.model_key)
        failure = _check_assembled(upload, stored_model, sha256)
        if failure is not None:
            raise failure
        stored = {
            CONFIG_NAME: StoredObject(upload.config_key, upload.config_size, upload.config_sha256),
            MODEL_NAME: stored_model,
        }
        # Caps again, on what was actually stored.
        check_sizes({name: obj.size for name, obj in stored.items()})
        return _create_version(
            access=access,
            adapter=adapter,
            stored=stored,
            signature=signature,
            request_id=request_id,
            uploaded_by=upload.started_by,
            direct_upload=upload,
        )
    except ApplicationError as exc:
        if exc.code != "upload.parts_invalid":
            _discard(upload, actor=access.user, reason=exc.code, request_id=request_id, quiet=True)
        raise
    except StorageError as exc:
        _discard(upload, actor=access.user, reason=exc.code, request_id=request_id, quiet=True)
        raise ApplicationError(
            "upload.storage_failed",
            f"Completing the upload failed: {exc}. It was discarded; upload again.",
            status=503,
        ) from None
    except BaseException:
        _discard(
            upload, actor=access.user, reason="upload.failed", request_id=request_id, quiet=True
        )
        raise


def direct_upload_abort(*, access: Access, upload: DirectUpload, request_id: str = "") -> None:
    access.require_adapter(upload.adapter, "upload_version")
    if upload.started_by_id != access.user.pk and not access.tenant_can(upload.tenant, "release"):
        raise NotFound("upload.not_found", f"Pending upload '{upload.public_id}' is not yours.")
    if not _claim(upload):
        raise Conflict("upload.completing", "This upload is being completed; wait for the result.")
    try:
        _discard(upload, actor=access.user, reason="aborted", request_id=request_id)
    except StorageError as exc:
        _release(upload)
        raise ApplicationError(
            "upload.storage_failed",
            f"Aborting failed: {exc}. The upload is still pending; retry.",
            status=503,
        ) from None


def expire_direct_uploads(*, now: datetime | None = None) -> int:
    """Discard expired uploads and completions that died mid-way (beat entry)."""
    now = now or timezone.now()
    stale = DirectUpload.objects.filter(
        Q(expires_at__lte=now, state=DirectUploadState.PENDING)
        | Q(state=DirectUploadState.COMPLETING, claimed_at__lt=now - COMPLETION_LEASE)
    ).select_related("tenant", "adapter")
    count = 0
    for upload in stale[:500]:
        if not _claim(upload):
            continue  # a completion took it meanwhile
        try:
            _discard(upload, actor=None, reason="upload.expired", request_id="")
            count += 1
        except StorageError as exc:
            log.warning("could not discard expired upload %s: %s", upload.public_id, exc)
    return count


# -- internals ----------------------------------------------------------------------------------


def _object_id(upload: DirectUpload) -> str:
    return f"{upload.tenant.slug}/{upload.adapter.name}/uploads/{upload.public_id}"


def _claim(upload: DirectUpload) -> bool:
    now = timezone.now()
    claimed = (
        DirectUpload.objects.filter(pk=upload.pk)
        .filter(
            Q(state=DirectUploadState.PENDING)
            | Q(state=DirectUploadState.COMPLETING, claimed_at__lt=now - COMPLETION_LEASE)
        )
        .update(state=DirectUploadState.COMPLETING, claimed_at=now)
    )
    return claimed == 1


def _release(upload: DirectUpload) -> None:
    DirectUpload.objects.filter(pk=upload.pk).update(
        state=DirectUploadState.PENDING, claimed_at=None
    )


def _hash_stored(storage: Any, key: str) -> StoredObject:
    """Stream the assembled object once: its real size and sha256 (never what the client says)."""
    hasher = hashlib.sha256()
    size = 0
    with storage.open(key) as stream:
        for chunk in read_stored(stream, hasher):
            size += len(chunk)
    return StoredObject(key=key, size=size, sha256=hasher.hexdigest())


def _check_assembled(
    upload: DirectUpload, stored: StoredObject, sha256: str | None
) -> ApplicationError | None:
    if stored.size != upload.model_size:
        return ApplicationError(
            "upload.size_mismatch",
            f"The assembled model file has {stored.size} bytes; the upload "
            f"announced {upload.model_size}. It was discarded.",
        )
    if sha256 is not None and stored.sha256 != sha256.lower():
        return ApplicationError(
            "upload.sha256_mismatch",
            f"The assembled model file has sha256 {stored.sha256}, not "
            f"the {sha256} you gave. It was discarded.",
        )
    return None


def _discard_objects(storage: Any, prefix: str) -> None:
    # The upload's folder holds its config, its model object and any unfinished multipart upload.
    try:
        storage.delete_prefix(prefix)
    except StorageError as exc:
        log.warning("could not remove %s: %s (the expiry sweep retries)", prefix, exc)


def _discard(
    upload: DirectUpload, *, actor: Any, reason: str, request_id: str, quiet: bool = False
) -> None:
    """Remove the upload's objects and multipart upload, then its row, with an audit event.

    Storage first: if it fails the row stays, so the sweep can retry. `quiet`: while another error
    propagates, that error is the one to report; this one is logged.
    """
    storage = get_storage()
    prefix = upload.config_key.rsplit("/", 1)[0] + "/"
    try:
        storage.delete_prefix(prefix)
    except StorageError as exc:
        if not quiet:
            raise
        log.warning("could not remove %s: %s (the expiry sweep retries)", prefix, exc)
        return
    with transaction.atomic():
        deleted, _ = DirectUpload.objects.filter(pk=upload.pk).delete()
        if deleted:
            record_event(
                action="upload.discard",
                actor=actor,
                tenant=upload.tenant,
                obj=upload,
                object_id=_object_id(upload),
                before={"state": upload.state},
                after={"reason": reason},
                request_id=request_id,
            )


def _ranges(numbers: list[int]) -> str:
    if not numbers:
        return "no parts"
    shown = ", ".join(str(n) for n in numbers[:20])
    return f"parts {shown}{', ...' if len(numbers) > 20 else ''}"
