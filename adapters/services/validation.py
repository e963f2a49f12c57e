"""Running validation on an uploaded version: files are streamed from storage, never copied.

The claim (uploaded -> validating) is a conditional update, so a redelivered task does nothing;
a claim older than the lease is taken over, so a worker that died mid-run cannot strand a version.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Min, Q
from django.utils import timezone

from adapters.models import AdapterVersion, VersionStatus
from adapters.services.lifecycle import version_record_validation
from adapters.services.registry import base_model_spec
from adapters.storage import StorageError, get_storage
from adapters.validation.signatures import TrustedKey
from adapters.validation.validator import validate_adapter

log = logging.getLogger(__name__)
S = VersionStatus
CHANGED_SINCE_UPLOAD = {
    "code": "storage.changed_since_upload",
    "message": "The stored files differ from what was uploaded (their digest changed); upload the adapter again.",
}


class TransientValidationFailure(Exception):
    """Storage was unreachable; the claim is released so a retry can take it again."""


def claim_lease() -> timedelta:
    return timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)


def version_claim_for_validation(*, version_id: int) -> bool:
    stale = timezone.now() - claim_lease()
    return (
        AdapterVersion.objects.filter(pk=version_id)
        .filter(Q(status=S.UPLOADED) | Q(status=S.VALIDATING, updated_at__lt=stale))
        .update(status=S.VALIDATING, updated_at=timezone.now())
        == 1
    )


def _release_claim(version_id: int) -> None:
    AdapterVersion.objects.filter(pk=version_id, status=S.VALIDATING).update(
        status=S.UPLOADED, updated_at=timezone.now()
    )


def max_rank_for(version: AdapterVersion) -> int:
    """The smallest max_lora_rank among engines that could serve it: an adapter that fits only
    some engines would fail to load on the others."""
    from workers.models import Engine

    engines = Engine.objects.filter(base_model=version.adapter.base_model)
    pool = version.adapter.pool or version.tenant.pool
    if pool:
        engines = engines.filter(pool=pool)
    return engines.aggregate(rank=Min("max_lora_rank"))["rank"] or settings.DEFAULT_MAX_LORA_RANK


def run_validation(*, version_id: int) -> AdapterVersion | None:
    """Validate one version; None when another delivery already has it (or it is done)."""
    if not version_claim_for_validation(version_id=version_id):
        log.info("validation of version %s already claimed or done", version_id)
        return None
    try:
        return _validate_claimed(version_id)
    except Exception:
        # Whatever failed (storage, a locked database), the next delivery must be able to claim it
        # at once rather than after the lease.
        with contextlib.suppress(DatabaseError):
            _release_claim(version_id)
        raise


def _validate_claimed(version_id: int) -> AdapterVersion:
    version = AdapterVersion.objects.select_related("adapter__base_model", "tenant").get(
        pk=version_id
    )
    tenant = version.tenant
    keys = [
        TrustedKey(key_id=key.name, public_key_pem=key.public_key_pem.encode())
        for key in tenant.signing_keys.filter(revoked_at__isnull=True)
    ]
    storage = get_storage()
    try:
        with contextlib.ExitStack() as stack:
            streams = {
                name: stack.enter_context(storage.open(key))
                for name, key in version.quarantine_keys.items()
            }
            report = validate_adapter(
                streams,
                base_model=base_model_spec(version.adapter.base_model),
                max_rank=max_rank_for(version),
                signature=base64.b64decode(version.signature) if version.signature else None,
                trusted_keys=keys,
                require_signature=tenant.require_signatures,
            )
    except (StorageError, OSError) as exc:  # a local-disk stream raises OSError mid-read
        raise TransientValidationFailure(str(exc)) from exc
    result = report.to_dict()
    if report.valid and report.manifest_sha256 != version.manifest_sha256:
        # What is in quarantine is not what was uploaded: never let it through.
        result["valid"] = False
        result["errors"].append(CHANGED_SINCE_UPLOAD)
    fields = {
        "rank": report.rank,
        "alpha": report.alpha,
        "target_modules": report.target_modules,
        "dtype": report.dtype or "",
        "config": report.config or {},
        "signer": report.signer or "",
    }
    return version_record_validation(version=version, report=result, fields=fields)


def stalled_validation_ids(*, grace: timedelta = timedelta(minutes=10)) -> list[int]:
    """Uploaded for longer than `grace` without a claim, or claimed longer than the lease ago."""
    now = timezone.now()
    return list(
        AdapterVersion.objects.filter(
            Q(status=S.UPLOADED, updated_at__lt=now - grace)
            | Q(status=S.VALIDATING, updated_at__lt=now - claim_lease())
        ).values_list("pk", flat=True)[:500]
    )
