"""Reconciliation: every period, every engine is converged towards what the portal wants.

After an engine restart it has forgotten every adapter loaded at run time; after `disable` a
version must leave every engine; a lost task or a dead worker leaves work half done. The beat
entry `reconcile-fleet` fans one converge pass out to each engine's node queue, so whatever
happened, the fleet is back within one period plus the load time.
"""

from __future__ import annotations

from django.conf import settings

from adapters.models import AdapterVersion
from workers.alarms import alarm_clear
from workers.desired import enqueue_converge
from workers.models import AlarmKind, Engine, FleetAction, Residency
from workers.node_copies import stage_version_files
from workers.selectors import holdable
from workers.staging import cleanup_node


def reconcile_fleet_pass() -> dict[str, str]:
    """Enqueue a converge pass for every engine; a pass on a down engine probes it first and
    brings it back (warming, then up) as soon as it answers."""
    out: dict[str, str] = {}
    for engine in Engine.objects.all():
        enqueue_converge(engine)
        out[engine.name] = "converge enqueued"
    return out


def stage_version_on_engine(*, engine_id: int, version_id: int) -> str:
    """Pre-stage a version's files on the engine's node (idempotent); quarantine a bad copy."""
    engine = Engine.objects.filter(pk=engine_id).first()
    version = (
        AdapterVersion.objects.select_related("adapter__tenant", "tenant")
        .filter(pk=version_id)
        .first()
    )
    if engine is None or version is None or not holdable(version):
        return "skipped"
    row, _ = Residency.objects.get_or_create(engine=engine, version=version)
    stage_version_files(engine, version, row, reason="pre-staged after approval", retry=True)
    alarm_clear(engine=engine, kind=AlarmKind.QUARANTINE, subject=version.served_name)
    return "staged"


def cleanup_engine_node(engine: Engine, registered: set[str]) -> list[str]:
    """Delete staged copies nobody holds or wants, after the grace period; never a registered one."""
    keep = set(registered) | {
        r.version.served_name
        for r in Residency.objects.filter(engine=engine).select_related("version")
        if holdable(r.version)
    }
    removed = cleanup_node(
        adapter_root=engine.adapter_root, keep=keep, grace_s=settings.FLEET_STAGING_GRACE_SECONDS
    )
    for name in removed:
        FleetAction.objects.create(
            engine=engine, served_name=name, kind="cleanup", reason="staged copy nobody holds"
        )
    if removed:
        Residency.objects.filter(engine=engine, version__served_name__in=removed).update(
            staged_at=None
        )
    return removed
