"""Purging rejected versions' quarantine objects after the retention period.

A rejected version keeps its files for QUARANTINE_RETENTION_DAYS (a reviewer or the uploader may
want to look) and they count against the tenant's storage quota until then. The purge deletes
the objects first and then empties `quarantine_keys` under the row's lock, with an audit event:
a run that dies between the two repeats the (idempotent) deletes next time, and two runs at
once audit one purge.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from adapters.models import AdapterVersion, VersionStatus
from adapters.storage import StorageError, get_storage
from core.audit import record_event

log = logging.getLogger(__name__)
BATCH = 200  # per run; the hourly beat entry takes the rest


def purgeable_versions(*, now: datetime | None = None) -> list[AdapterVersion]:
    """Rejected versions still holding quarantine objects, rejected before the retention cut.

    A rejected version never changes again until it is purged, so `updated_at` is the time of
    its rejection (by the validator or a reviewer).
    """
    cutoff = (now or timezone.now()) - timedelta(days=settings.QUARANTINE_RETENTION_DAYS)
    return list(
        AdapterVersion.objects.filter(status=VersionStatus.REJECTED, updated_at__lt=cutoff)
        .exclude(quarantine_keys={})
        .select_related("tenant", "adapter")
        .order_by("updated_at", "pk")[:BATCH]
    )


def purge_rejected_quarantine(*, now: datetime | None = None) -> int:
    """Purge every version past its retention; returns how many were purged."""
    storage = get_storage()
    purged = 0
    for version in purgeable_versions(now=now):
        try:
            for key in version.quarantine_keys.values():
                storage.delete(key)
        except StorageError:
            # Keys stay in the row, so its bytes still count and the next run tries again.
            log.warning("purging quarantine of version %s failed", version.pk, exc_info=True)
            continue
        purged += _forget_quarantine(version)
    return purged


def _forget_quarantine(version: AdapterVersion) -> int:
    with transaction.atomic():
        locked = AdapterVersion.objects.select_for_update().get(pk=version.pk)
        if locked.status != VersionStatus.REJECTED or not locked.quarantine_keys:
            return 0  # another run purged it first
        before = {"quarantine_keys": locked.quarantine_keys, "size_bytes": locked.size_bytes}
        locked.quarantine_keys = {}
        locked.save(update_fields=["quarantine_keys", "updated_at"])
        record_event(
            action="version.quarantine_purge",
            actor="quarantine-purge",
            tenant=version.tenant,
            obj=locked,
            object_id=f"{version.tenant.slug}/{version.adapter.name}@{version.number}",
            before=before,
            after={"quarantine_keys": {}, "retention_days": settings.QUARANTINE_RETENTION_DAYS},
        )
    return 1
