"""Reads the registry pages need beyond the API's: a version's history and where it stands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapters.models import AdapterVersion, VersionStatus

S = VersionStatus
# The main line of the lifecycle, in order; a side exit (rejected, disabled, retired) is shown
# after the steps the version passed.
MAIN_LINE = (S.UPLOADED, S.VALIDATING, S.VALIDATED, S.STAGED, S.ACTIVE)


@dataclass(frozen=True)
class Step:
    status: str
    state: str  # done, current, todo


def lifecycle_steps(version: AdapterVersion) -> list[Step]:
    """The main line with the version's place on it; an exit replaces the steps it skipped."""
    status = version.status
    if status in MAIN_LINE:
        at = MAIN_LINE.index(status)
        return [
            Step(s, "done" if i < at else "current" if i == at else "todo")
            for i, s in enumerate(MAIN_LINE)
        ]
    reached = [s for s in MAIN_LINE if _reached(version, s)]
    return [*(Step(s, "done") for s in reached), Step(status, "current")]


def _reached(version: AdapterVersion, status: str) -> bool:
    """Whether a version now off the main line passed `status` on its way (its timestamps)."""
    if status in (S.UPLOADED, S.VALIDATING):
        return True
    if status == S.VALIDATED:
        return bool((version.validation_report or {}).get("valid"))
    if status == S.STAGED:
        return version.approved_at is not None
    return version.released_at is not None


def version_timeline(version: AdapterVersion) -> list[Any]:
    """Every audited event of this version, oldest first: upload, validation, decisions."""
    from core.audit_models import AuditEvent

    label = f"{version.tenant.slug}/{version.adapter.name}@{version.number}"
    return list(
        AuditEvent.objects.filter(
            tenant_id=version.tenant_id, object_id=label, action__startswith="version."
        )
        .only("created_at", "action", "actor_label", "before", "after")
        .order_by("id")
    )


def tenant_summary(*, tenant: Any, adapters: Any) -> dict[str, Any]:
    """The tenant home's numbers: its versions per status and what it uses of its quotas."""
    from django.db.models import Count, Sum

    versions = AdapterVersion.objects.filter(tenant=tenant)
    by_status = dict(
        versions.order_by().values("status").annotate(n=Count("id")).values_list("status", "n")
    )
    stored = versions.exclude(status=S.REJECTED).aggregate(total=Sum("size_bytes"))["total"]
    return {
        "by_status": [(s, by_status.get(s, 0)) for s in S.values if by_status.get(s)],
        "adapters_used": adapters.count(),
        "stored_bytes": stored or 0,
    }
