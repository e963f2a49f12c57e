"""Uploading a new version: limits and quota first, then stream to quarantine, then one row.

Files go to storage before the database row exists, under a fresh upload id, so a failure at
any point leaves either nothing (the stored objects are removed) or a complete `uploaded` version.
"""

from __future__ import annotations

import base64
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Sum
from django.utils import timezone

from adapters import tracing
from adapters.models import Adapter, AdapterVersion, DirectUpload, VersionStatus
from adapters.storage import StorageError, StoredObject, TooLarge, get_storage, quarantine_key
from adapters.storage.streams import Readable
from adapters.validation.report import FileDigest, manifest_sha256
from core import telemetry
from core.audit import record_event
from core.errors import ApplicationError
from core.tasks import task_named
from tenants.access_port import Access
from tenants.models import Tenant

CONFIG_NAME = "adapter_config.json"
MODEL_NAME = "adapter_model.safetensors"
MAX_SIGNATURE_BYTES = 256 * 1024

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IncomingFile:
    stream: Readable  # what the storage reads: an uploaded file, a request body, an open file
    size: int | None  # as announced; the stored size is what counts


def size_limits() -> dict[str, int]:
    return {
        CONFIG_NAME: settings.ADAPTER_MAX_CONFIG_BYTES,
        MODEL_NAME: settings.ADAPTER_MAX_MODEL_BYTES,
    }


def check_sizes(sizes: dict[str, int | None]) -> None:
    """Refuse any file announced over its cap (`upload.too_large`) before a byte is stored."""
    limits = size_limits()
    for name, size in sizes.items():
        if size is not None and size > limits[name]:
            raise ApplicationError(
                "upload.too_large",
                f"{name} is {size} bytes; the limit is {limits[name]} bytes.",
                status=413,
                limit_bytes=limits[name],
            )


def storage_used(tenant: Tenant) -> int:
    """Bytes of every version whose files are still stored, whatever its status: a rejected
    version counts until the quarantine purge deletes its objects and empties its keys
    (adapters/services/quarantine.py)."""
    return (
        AdapterVersion.objects.filter(tenant=tenant)
        .exclude(quarantine_keys={}, serving_keys={})
        .aggregate(total=Sum("size_bytes"))["total"]
        or 0
    )


def storage_reserved(tenant: Tenant, *, exclude_upload: int | None = None) -> int:
    """Bytes promised to pending direct uploads: their parts may arrive in S3 at any moment."""
    pending = DirectUpload.objects.filter(tenant=tenant, expires_at__gt=timezone.now())
    if exclude_upload is not None:
        pending = pending.exclude(pk=exclude_upload)
    total = pending.aggregate(total=Sum(F("model_size") + F("config_size")))["total"]
    return int(total or 0)


def check_quota(tenant: Tenant, incoming: int, *, exclude_upload: int | None = None) -> None:
    used = storage_used(tenant)
    reserved = storage_reserved(tenant, exclude_upload=exclude_upload)
    if used + reserved + incoming > tenant.quota_storage_bytes:
        pending = f" and {reserved} bytes reserved by pending direct uploads" if reserved else ""
        raise ApplicationError(
            "quota.storage",
            f"This upload ({incoming} bytes) would take tenant '{tenant.slug}' to {used + reserved + incoming} "
            f"bytes ({used} stored{pending}), over its storage quota of {tenant.quota_storage_bytes} bytes. "
            "Every stored version counts, rejected ones until their files are purged "
            f"{settings.QUARANTINE_RETENTION_DAYS} days after the rejection; "
            "ask a platform admin for a larger quota.",
            status=413,
            used_bytes=used,
            reserved_bytes=reserved,
            quota_bytes=tenant.quota_storage_bytes,
        )


# Multipart framing, field names, headers and a signature: what a request body may hold besides
# the two files' bytes. Only used to refuse hopeless uploads before their body is parsed.
BODY_OVERHEAD_ALLOWANCE = MAX_SIGNATURE_BYTES + 64 * 1024


def upload_precheck(*, access: Access, adapter: Adapter, content_length: int | None) -> None:
    """Refuse an upload whose request body cannot fit, from its Content-Length alone.

    Runs before the multipart body is parsed, so a client sending gigabytes over the cap or the
    quota is told at once and nothing is spooled to disk. The exact checks run again on the files.
    """
    access.require_adapter(adapter, "upload_version")
    if not content_length:
        return
    least_file_bytes = content_length - BODY_OVERHEAD_ALLOWANCE
    cap = sum(size_limits().values())
    if least_file_bytes > cap:
        raise ApplicationError(
            "upload.too_large",
            f"The request body is {content_length} bytes; the two files may "
            f"hold at most {cap} bytes together.",
            status=413,
            limit_bytes=cap,
        )
    if least_file_bytes > 0:
        check_quota(adapter.tenant, least_file_bytes)


def served_name_for(tenant_slug: str, adapter_name: str, number: int, digest: str) -> str:
    """Immutable, unique, and the name of its directory on every engine node."""
    return f"{tenant_slug}--{adapter_name}--v{number}-{digest[:8]}"


def next_number_guess(adapter: Adapter) -> int:
    # The number in a quarantine key is a guess (the row takes the next free number under a lock);
    # the upload id alone keeps keys unique, and the row records the exact keys.
    return (adapter.versions.aggregate(n=Max("number"))["n"] or 0) + 1


def version_upload(
    *,
    access: Access,
    adapter: Adapter,
    config: IncomingFile,
    model: IncomingFile,
    signature: bytes | None = None,
    request_id: str = "",
) -> AdapterVersion:
    access.require_adapter(adapter, "upload_version")
    tenant = adapter.tenant
    check_sizes({CONFIG_NAME: config.size, MODEL_NAME: model.size})
    if signature is not None and len(signature) > MAX_SIGNATURE_BYTES:
        raise ApplicationError(
            "upload.signature_too_large",
            f"The signature is larger than {MAX_SIGNATURE_BYTES} bytes.",
            status=413,
        )
    announced = (config.size or 0) + (model.size or 0)
    check_quota(tenant, announced)

    storage = get_storage()
    upload_id = uuid.uuid4().hex
    guess = next_number_guess(adapter)
    limits = size_limits()
    stored: dict[str, Any] = {}
    try:
        for name, incoming in ((CONFIG_NAME, config), (MODEL_NAME, model)):
            key = quarantine_key(tenant.slug, adapter.name, guess, upload_id, name)
            stored[name] = storage.save_stream(key, incoming.stream, max_bytes=limits[name])
        return _create_version(
            access=access,
            adapter=adapter,
            stored=stored,
            signature=signature,
            request_id=request_id,
        )
    except TooLarge as exc:
        _remove(storage, stored)
        raise ApplicationError("upload.too_large", str(exc), status=413) from None
    except StorageError as exc:
        _remove(storage, stored)
        raise ApplicationError(
            "upload.storage_failed",
            f"Storing the upload failed: {exc}. Nothing was kept; retry.",
            status=503,
        ) from None
    except BaseException:
        _remove(storage, stored)
        raise


def _remove(storage: Any, stored: dict[str, StoredObject]) -> None:
    for obj in stored.values():
        try:
            storage.delete(obj.key)
        except StorageError:
            # Best effort: no row points at the object, so nothing serves it; log it for cleanup.
            log.warning("could not remove orphaned upload object %s", obj.key, exc_info=True)


def _create_version(
    *,
    access: Access,
    adapter: Adapter,
    stored: dict[str, StoredObject],
    signature: bytes | None,
    request_id: str,
    uploaded_by: Any = None,
    direct_upload: DirectUpload | None = None,
) -> AdapterVersion:
    """The one way a version row comes to exist, for both upload paths: quota again under the
    tenant's lock, the next number under the adapter's lock, the row, its audit event, and the
    validation task after commit. A direct upload's pending row is deleted in the same transaction.
    """
    files = [
        FileDigest(name=name, size=obj.size, sha256=obj.sha256)
        for name, obj in sorted(stored.items())
    ]
    digest = manifest_sha256(files)
    size = sum(f.size for f in files)
    with tracing.upload_span(adapter), transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=adapter.tenant_id)
        # Again, under the lock: concurrent uploads cannot both fit.
        check_quota(tenant, size, exclude_upload=direct_upload.pk if direct_upload else None)
        locked = Adapter.objects.select_for_update().get(pk=adapter.pk)
        number = (locked.versions.aggregate(n=Max("number"))["n"] or 0) + 1
        version = AdapterVersion.objects.create(
            tenant=tenant,
            adapter=locked,
            number=number,
            status=VersionStatus.UPLOADED,
            served_name=served_name_for(tenant.slug, locked.name, number, digest),
            manifest=[{"name": f.name, "size": f.size, "sha256": f.sha256} for f in files],
            manifest_sha256=digest,
            size_bytes=size,
            signature=base64.b64encode(signature).decode() if signature else "",
            quarantine_keys={name: obj.key for name, obj in stored.items()},
            uploaded_by=uploaded_by or access.user,
            upload_traceparent=telemetry.current_traceparent(),
        )
        tracing.uploaded(version)
        after: dict[str, Any] = {
            "status": VersionStatus.UPLOADED,
            "manifest_sha256": digest,
            "size_bytes": size,
            "signed": bool(signature),
        }
        if direct_upload is not None:
            after["direct_upload"] = direct_upload.public_id
            direct_upload.delete()
        record_event(
            action="version.upload",
            actor=access.user,
            tenant=tenant,
            obj=version,
            object_id=f"{tenant.slug}/{locked.name}@{number}",
            after=after,
            request_id=request_id,
        )
        transaction.on_commit(lambda: _enqueue_validation(version.pk))
    return version


def _enqueue_validation(version_id: int) -> None:
    task_named("adapters.tasks.validate_version").delay(version_id)
