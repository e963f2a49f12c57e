"""Uploading a new version: limits and quota first, then stream to quarantine, then one row.

Files go to storage before the database row exists, under a fresh upload id, so a failure at
any point leaves either nothing (the stored objects are removed) or a complete `uploaded` version.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any, BinaryIO

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Sum

from adapters.models import Adapter, AdapterVersion, VersionStatus
from adapters.storage import StorageError, TooLarge, get_storage, quarantine_key
from adapters.validation.report import FileDigest, manifest_sha256
from portal.audit import record_event
from portal.errors import ApplicationError
from tenants.access import AccessContext
from tenants.models import Tenant

CONFIG_NAME = "adapter_config.json"
MODEL_NAME = "adapter_model.safetensors"
MAX_SIGNATURE_BYTES = 256 * 1024
# Versions whose files no longer count against the storage quota.
NOT_COUNTED = (VersionStatus.REJECTED, VersionStatus.RETIRED)


@dataclass(frozen=True)
class IncomingFile:
    stream: BinaryIO
    size: int | None  # as announced; the stored size is what counts


def storage_used(tenant: Tenant) -> int:
    return (
        AdapterVersion.objects.filter(tenant=tenant)
        .exclude(status__in=NOT_COUNTED)
        .aggregate(total=Sum("size_bytes"))["total"]
        or 0
    )


def _check_quota(tenant: Tenant, incoming: int) -> None:
    used = storage_used(tenant)
    if used + incoming > tenant.quota_storage_bytes:
        raise ApplicationError(
            "quota.storage",
            f"This upload ({incoming} bytes) would take tenant '{tenant.slug}' to {used + incoming} bytes, "
            f"over its storage quota of {tenant.quota_storage_bytes} bytes. Retire or delete old versions, "
            "or ask a platform admin for a larger quota.",
            status=413,
            used_bytes=used,
            quota_bytes=tenant.quota_storage_bytes,
        )


def served_name_for(tenant_slug: str, adapter_name: str, number: int, digest: str) -> str:
    """Immutable, unique, and the name of its directory on every engine node."""
    return f"{tenant_slug}--{adapter_name}--v{number}-{digest[:8]}"


def version_upload(
    *,
    access: AccessContext,
    adapter: Adapter,
    config: IncomingFile,
    model: IncomingFile,
    signature: bytes | None = None,
    request_id: str = "",
) -> AdapterVersion:
    access.require_adapter(adapter, "upload_version")
    tenant = adapter.tenant
    limits = {CONFIG_NAME: settings.ADAPTER_MAX_CONFIG_BYTES, MODEL_NAME: settings.ADAPTER_MAX_MODEL_BYTES}
    for name, incoming in ((CONFIG_NAME, config), (MODEL_NAME, model)):
        if incoming.size is not None and incoming.size > limits[name]:
            raise ApplicationError("upload.too_large", f"{name} is {incoming.size} bytes; the limit is {limits[name]} bytes.", status=413)
    if signature is not None and len(signature) > MAX_SIGNATURE_BYTES:
        raise ApplicationError("upload.signature_too_large", f"The signature is larger than {MAX_SIGNATURE_BYTES} bytes.", status=413)
    announced = (config.size or 0) + (model.size or 0)
    _check_quota(tenant, announced)

    storage = get_storage()
    upload_id = uuid.uuid4().hex
    # The number in the key is a guess (the row takes the next free number under a lock); the
    # upload id alone keeps keys unique, and the row records the exact keys.
    guess = (adapter.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    stored: dict[str, Any] = {}
    try:
        for name, incoming in ((CONFIG_NAME, config), (MODEL_NAME, model)):
            key = quarantine_key(tenant.slug, adapter.name, guess, upload_id, name)
            stored[name] = storage.save_stream(key, incoming.stream, max_bytes=limits[name])
        return _create_version(access, adapter, stored, signature, request_id)
    except TooLarge as exc:
        _remove(storage, stored)
        raise ApplicationError("upload.too_large", str(exc), status=413) from None
    except StorageError as exc:
        _remove(storage, stored)
        raise ApplicationError("upload.storage_failed", f"Storing the upload failed: {exc}. Nothing was kept; retry.", status=503) from None
    except BaseException:
        _remove(storage, stored)
        raise


def _remove(storage: Any, stored: dict[str, Any]) -> None:
    for obj in stored.values():
        try:
            storage.delete(obj.key)
        except StorageError:
            pass  # best effort; quarantine objects without a row are swept by the reconcile task


def _create_version(
    access: AccessContext, adapter: Adapter, stored: dict[str, Any], signature: bytes | None, request_id: str
) -> AdapterVersion:
    files = [FileDigest(name=name, size=obj.size, sha256=obj.sha256) for name, obj in sorted(stored.items())]
    digest = manifest_sha256(files)
    size = sum(f.size for f in files)
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=adapter.tenant_id)
        _check_quota(tenant, size)  # again, under the lock: concurrent uploads cannot both fit
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
            uploaded_by=access.user,
        )
        record_event(
            action="version.upload", actor=access.user, tenant=tenant, obj=version,
            object_id=f"{tenant.slug}/{locked.name}@{number}",
            after={"status": VersionStatus.UPLOADED, "manifest_sha256": digest, "size_bytes": size,
                   "signed": bool(signature)},
            request_id=request_id,
        )
        transaction.on_commit(lambda: _enqueue_validation(version.pk))
    return version


def _enqueue_validation(version_id: int) -> None:
    from adapters.tasks import validate_version

    validate_version.delay(version_id)
