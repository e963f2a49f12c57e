"""A node's copy of a version that failed verification: moved aside, recorded, alarmed; the
next converge pass stages a fresh copy from the store."""

from __future__ import annotations

from django.utils import timezone

from adapters.models import AdapterVersion
from workers.alarms import alarm_raise
from workers.models import AlarmKind, Engine, FleetAction, Residency
from workers.staging import NodeCopyInvalid, StageResult, quarantine_node_copy, stage_on_node


def quarantine_version_copy(
    engine: Engine, version: AdapterVersion, row: Residency | None, bad: NodeCopyInvalid
) -> None:
    """The node's copy failed verification: move it aside, say so, and let a fresh copy come."""
    moved = quarantine_node_copy(engine.adapter_root, version.served_name)
    FleetAction.objects.create(
        engine=engine,
        version=version,
        served_name=version.served_name,
        kind="quarantine",
        reason=f"{bad.code}: {bad.message}"[:300],
        ok=True,
    )
    if row is not None:
        row.quarantined_at = timezone.now()
        row.quarantine_reason = f"{bad.code}: {bad.message}"
        row.staged_at = None
        row.save(update_fields=["quarantined_at", "quarantine_reason", "staged_at", "updated_at"])
    alarm_raise(
        engine=engine,
        kind=AlarmKind.QUARANTINE,
        subject=version.served_name,
        message=(
            f"The copy of {version.served_name} on {engine.name}'s node failed verification "
            f"({bad.code}: {bad.message}); moved to {moved} and re-staged from the store."
        ),
        details={"code": bad.code, "moved_to": str(moved) if moved else ""},
    )


def stage_version_files(
    engine: Engine, version: AdapterVersion, row: Residency | None, *, reason: str, retry: bool
) -> StageResult:
    """A verified copy on the node, recorded: a bad copy is quarantined, then (with `retry`)
    replaced at once, else left for the next pass. Marks the row staged; logs a download."""
    try:
        result = stage_on_node(adapter_root=engine.adapter_root, version=version)
    except NodeCopyInvalid as bad:
        quarantine_version_copy(engine, version, row, bad)
        if not retry:
            raise
        result = stage_on_node(adapter_root=engine.adapter_root, version=version)
    if row is not None and row.staged_at is None:
        row.staged_at = timezone.now()
        row.save(update_fields=["staged_at", "updated_at"])
    if result.downloaded:
        FleetAction.objects.create(
            engine=engine,
            version=version,
            served_name=version.served_name,
            kind="stage",
            reason=reason,
            latency_ms=result.ms,
        )
    return result
