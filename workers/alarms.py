"""Engine alarms: raised once while a condition lasts, cleared when it ends; both audited."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import record_event
from workers.models import Engine, EngineAlarm


def alarm_raise(
    *, engine: Engine, kind: str, subject: str, message: str, details: dict[str, Any] | None = None
) -> EngineAlarm | None:
    """Open an alarm unless one is open for (engine, kind, subject); None if it already was."""
    if EngineAlarm.objects.filter(
        engine=engine, kind=kind, subject=subject, cleared_at__isnull=True
    ).exists():
        return None
    try:
        with transaction.atomic():
            alarm = EngineAlarm.objects.create(
                engine=engine, kind=kind, subject=subject, message=message, details=details or {}
            )
            record_event(
                action="engine.alarm.raise",
                actor="controller",
                obj=engine,
                object_id=engine.name,
                after={"kind": kind, "subject": subject, "message": message},
            )
    except IntegrityError:  # raised concurrently by another worker
        return None
    return alarm


def alarm_clear(*, engine: Engine, kind: str, subject: str) -> bool:
    with transaction.atomic():
        alarm = (
            EngineAlarm.objects.select_for_update()
            .filter(engine=engine, kind=kind, subject=subject, cleared_at__isnull=True)
            .first()
        )
        if alarm is None:
            return False
        alarm.cleared_at = timezone.now()
        alarm.save(update_fields=["cleared_at"])
        record_event(
            action="engine.alarm.clear",
            actor="controller",
            obj=engine,
            object_id=engine.name,
            before={"kind": kind, "subject": subject, "message": alarm.message},
        )
    return True


def open_alarms(engine: Engine | None = None):
    qs = EngineAlarm.objects.filter(cleared_at__isnull=True).select_related("engine")
    return qs.filter(engine=engine) if engine is not None else qs
