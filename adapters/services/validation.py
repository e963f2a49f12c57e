"""Running validation on an uploaded version: files are streamed from storage, never copied.

The claim (uploaded -> validating) is a conditional update, so a redelivered task does nothing;
a claim older than the lease is taken over, so a worker that died mid-run cannot strand a version.
Every run ends in a verdict except a storage outage (retried, not a verdict on the adapter): a
crash is `validation.internal_error`, the task's soft time limit `validation.timeout`, and a
version whose runs keep dying without a verdict (the hard limit, out of memory) is rejected with
`validation.attempts_exhausted` when it is claimed once more.
"""

from __future__ import annotations

import base64
import contextlib
import logging
from datetime import timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from adapters.fleet_port import fleet
from adapters.models import AdapterVersion, VersionStatus
from adapters.services.lifecycle import version_record_validation
from adapters.services.registry import base_model_spec
from adapters.storage import StorageError, get_storage
from adapters.tracing import traced_step
from adapters.validation.signatures import TrustedKey
from adapters.validation.validator import validate_adapter
from core.events import broadcast_after_commit

log = logging.getLogger(__name__)
S = VersionStatus
CHANGED_SINCE_UPLOAD = {
    "code": "storage.changed_since_upload",
    "message": "The stored files differ from what was uploaded (their digest changed); upload the adapter again.",
}


def _failure(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


class TransientValidationFailure(Exception):
    """Storage was unreachable; the claim is released so a retry can take it again."""


def claim_lease() -> timedelta:
    """Past the validation task's hard time limit, a claim's worker is surely gone."""
    return timedelta(seconds=settings.VALIDATION_TIME_LIMIT + 60)


def version_claim_for_validation(*, version_id: int, delivery: str = "") -> bool:
    """Claim the version for one run: uploaded, or validating under a lapsed lease, or validating
    under a claim of this same task (`delivery`, the Celery task id). The broker delivers a task
    again only once its run is gone: its worker process was killed (acks_late with
    reject_on_worker_lost requeues it at once) or it outlived the visibility timeout, far past
    the hard time limit. Without the last case, that redelivery found the version claimed and
    did nothing, and the version stayed `validating` until the lease lapsed and the beat's
    requeue came (tests/faults/test_worker_killed.py)."""
    stale = timezone.now() - claim_lease()
    claimable = Q(status=S.UPLOADED) | Q(status=S.VALIDATING, updated_at__lt=stale)
    if delivery:
        claimable |= Q(status=S.VALIDATING, validation_report__claimed_by=delivery)
    with transaction.atomic():  # the claim and its owner together: a kill between them
        rows = AdapterVersion.objects.filter(pk=version_id)
        claimed = rows.filter(claimable).update(status=S.VALIDATING, updated_at=timezone.now()) == 1
        if claimed and delivery:
            report = rows.values_list("validation_report", flat=True).get() or {}
            rows.update(validation_report={**report, "claimed_by": delivery})
    if claimed:
        _announce_validating(version_id)
    return claimed


def _announce_validating(version_id: int) -> None:
    """The claim is a conditional update, not an audited transition (the verdict is); the pages
    still show the version entering `validating` as it happens, on the tenant's events socket."""
    row = (
        AdapterVersion.objects.filter(pk=version_id)
        .values("tenant_id", "adapter__name", "number")
        .first()
    )
    if row is not None:
        broadcast_after_commit(
            tenant_id=row["tenant_id"],
            event={
                "kind": "version.status",
                "version": f"{row['adapter__name']}@{row['number']}",
                "from": S.UPLOADED,
                "to": S.VALIDATING,
            },
        )


def _release_claim(version_id: int, attempts: int) -> None:
    """Back to uploaded after a retryable failure, which does not count as an attempt."""
    AdapterVersion.objects.filter(pk=version_id, status=S.VALIDATING).update(
        status=S.UPLOADED,
        updated_at=timezone.now(),
        validation_report={"attempts": attempts} if attempts else {},
    )


def run_validation(*, version_id: int, delivery: str = "") -> AdapterVersion | None:
    """Validate one version; None when another delivery already has it (or it is done).
    `delivery` names the task delivering it, so that its redelivery may take its claim over."""
    if not version_claim_for_validation(version_id=version_id, delivery=delivery):
        log.info("validation of version %s already claimed or done", version_id)
        return None
    earlier = 0
    try:
        version = AdapterVersion.objects.select_related("adapter__base_model", "tenant").get(
            pk=version_id
        )
        # Counted before the run, in the row: a run the hard time limit kills leaves it counted.
        earlier = int((version.validation_report or {}).get("attempts", 0))
        if earlier >= settings.VALIDATION_MAX_ATTEMPTS:
            return _record_failure(
                version,
                "validation.attempts_exhausted",
                f"Validation was started {earlier} times and never finished (its worker was "
                "stopped each time: the time limit or lack of memory). Upload the adapter "
                "again; if this repeats, tell the platform team.",
            )
        report: dict[str, Any] = {"attempts": earlier + 1}
        if delivery:
            report["claimed_by"] = delivery
        AdapterVersion.objects.filter(pk=version_id).update(validation_report=report)
        return _validate_claimed(version)
    except (TransientValidationFailure, OperationalError):
        # Storage or a locked database: the next delivery must be able to claim it at once
        # rather than after the lease.
        with contextlib.suppress(DatabaseError):
            _release_claim(version_id, earlier)
        raise
    except SoftTimeLimitExceeded:
        return _record_failure(
            version,
            "validation.timeout",
            f"Validation took longer than its limit of {settings.VALIDATION_SOFT_TIME_LIMIT} s "
            "and was stopped. Validation reads each file once, so this means very slow "
            "storage or a very large file; upload the adapter again.",
        )
    except Exception as exc:
        log.exception("validation of version %s crashed", version_id)
        return _record_failure(
            version,
            "validation.internal_error",
            f"Validation stopped on an internal error ({type(exc).__name__}); this is not a "
            "verdict on the adapter's content. Upload it again; if this repeats, tell the "
            f"platform team (version id {version_id}).",
        )


def _record_failure(version: AdapterVersion, code: str, message: str) -> AdapterVersion:
    """Reject with one error and no parsed facts: a verdict, through the one transition."""
    report: dict[str, Any] = {
        "valid": False,
        "errors": [_failure(code, message)],
        "checks": [],
        "base_model": version.adapter.base_model.name,
    }
    return version_record_validation(version=version, report=report, fields={})


@traced_step("validate")
def _validate_claimed(version: AdapterVersion) -> AdapterVersion:
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
                max_rank=fleet().max_rank_for(version),
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
