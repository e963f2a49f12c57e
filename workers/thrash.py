"""The thrash alarm: an engine that keeps loading and evicting adapters, minute after minute.

`thrash_state` is the pure rule (no database); `alarms_check_thrash` raises or clears each
engine's open EngineAlarm(kind="thrash") from the FleetAction log, idempotently and audited.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import record_event
from workers.models import AlarmKind, Engine, EngineAlarm, FleetAction, FleetActionKind

THRASH_KINDS = (FleetActionKind.LOAD, FleetActionKind.EVICT)


@dataclass(frozen=True)
class ThrashState:
    # Loads+evictions in each minute of the window, oldest first.
    per_minute_counts: tuple[int, ...]
    per_minute: float
    window_s: int
    # Every minute of the window above the threshold: sustained, not a burst.
    thrashing: bool
    # The window's mean at or below the threshold: an open alarm may clear (hysteresis, so one
    # quiet minute does not clear and re-raise the alarm five minutes later).
    calm: bool

    @property
    def total(self) -> int:
        return sum(self.per_minute_counts)

    def as_details(self) -> dict[str, Any]:
        return {
            "per_minute_counts": list(self.per_minute_counts),
            "threshold_per_minute": self.per_minute,
            "window_s": self.window_s,
        }


def thrash_state(
    event_times: Iterable[datetime], *, now: datetime, per_minute: float, window_s: int
) -> ThrashState:
    """Count events per minute over (now - window_s, now]; minute i is (start+60i, start+60(i+1)].

    Events after `now` or at/before the window's start are ignored. A window that is not a whole
    number of minutes is rounded up to one.
    """
    minutes = max(1, math.ceil(window_s / 60))
    start = now - timedelta(seconds=60 * minutes)
    counts = [0] * minutes
    for at in event_times:
        if start < at <= now:
            offset = (at - start).total_seconds()
            counts[min(minutes - 1, math.ceil(offset / 60) - 1)] += 1
    return ThrashState(
        per_minute_counts=tuple(counts),
        per_minute=per_minute,
        window_s=60 * minutes,
        thrashing=all(count > per_minute for count in counts),
        calm=sum(counts) / minutes <= per_minute,
    )


@dataclass(frozen=True)
class ThrashChange:
    engine: str
    change: str  # "raised" | "cleared"
    alarm_id: int


def alarms_check_thrash(*, now: datetime | None = None) -> list[ThrashChange]:
    """Raise a thrash alarm on every engine thrashing now, clear it on every engine calm again.

    Three reads for the whole fleet, then one transaction per change. A second call with nothing
    new changes nothing and writes no event: the open alarm is only raised if none is open (the
    partial unique constraint backs this against a concurrent check), and cleared with a
    conditional update.
    """
    now = now or timezone.now()
    per_minute = float(settings.FLEET_THRASH_PER_MINUTE)
    window_s = int(settings.FLEET_THRASH_WINDOW_SECONDS)
    since = now - timedelta(seconds=60 * max(1, math.ceil(window_s / 60)))
    times: dict[int, list[datetime]] = defaultdict(list)
    # Failed attempts count too: a load that fails and is retried churns the engine as well.
    for engine_id, at in FleetAction.objects.filter(
        kind__in=THRASH_KINDS, created_at__gt=since, created_at__lte=now
    ).values_list("engine_id", "created_at"):
        times[engine_id].append(at)
    open_alarms = {
        alarm.engine_id: alarm
        for alarm in EngineAlarm.objects.filter(
            kind=AlarmKind.THRASH, subject="", cleared_at__isnull=True
        )
    }
    changes: list[ThrashChange] = []
    for engine in Engine.objects.only("id", "name"):
        state = thrash_state(times[engine.pk], now=now, per_minute=per_minute, window_s=window_s)
        alarm = open_alarms.get(engine.pk)
        if alarm is None and state.thrashing:
            message = (
                f"Engine {engine.name} loaded and evicted adapters {min(state.per_minute_counts)}"
                f"-{max(state.per_minute_counts)} times a minute for {state.window_s // 60} "
                f"minutes (threshold {per_minute:g}/min): its cache is too small for its working "
                "set. Check the flag advisor's --max-loras/--max-cpu-loras advice or move "
                "adapters to another engine."
            )
            try:
                with transaction.atomic():
                    alarm = EngineAlarm.objects.create(
                        engine=engine,
                        kind=AlarmKind.THRASH,
                        message=message,
                        details=state.as_details(),
                        raised_at=now,
                    )
                    record_event(
                        action="engine.alarm.raise",
                        actor="thrash-check",
                        obj=engine,
                        object_id=engine.name,
                        after={
                            "alarm": alarm.pk,
                            "kind": AlarmKind.THRASH,
                            "message": message,
                            **state.as_details(),
                        },
                    )
            except IntegrityError:
                continue  # a concurrent check raised it first
            changes.append(ThrashChange(engine=engine.name, change="raised", alarm_id=alarm.pk))
        elif alarm is not None and state.calm:
            with transaction.atomic():
                if not EngineAlarm.objects.filter(pk=alarm.pk, cleared_at__isnull=True).update(
                    cleared_at=now
                ):
                    continue  # a concurrent check cleared it first
                record_event(
                    action="engine.alarm.clear",
                    actor="thrash-check",
                    obj=engine,
                    object_id=engine.name,
                    before={"alarm": alarm.pk, "raised_at": alarm.raised_at},
                    after={"alarm": alarm.pk, "cleared_at": now, **state.as_details()},
                )
            changes.append(ThrashChange(engine=engine.name, change="cleared", alarm_id=alarm.pk))
    return changes
