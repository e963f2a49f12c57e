"""Warm-up and pin schedules: the django-celery-beat entries that carry business-hours windows,
and the task that applies a warm-up policy to the fleet.

The registry checks a policy (workers.schedule_rules, asked through adapters/fleet_port.py) before
it saves it and announces the change after commit (adapters.signals.adapter_schedule_changed),
to which `sync_adapter_schedule` reacts; beat (or the sync itself) runs `apply_warmup_window`, which
checks the rules again before it asks workers.desired for anything, because engines and beat
entries change behind the policy's back.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, time
from typing import Any
from zoneinfo import ZoneInfo

from celery import shared_task
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from adapters.models import Adapter, AdapterVersion, VersionStatus, WarmupPolicy
from adapters.selectors import pool_of
from adapters.warmup_window import (
    Problem,
    WarmupWindow,
    parse_days,
    valid_timezone,
    window_contains,
    window_problems,
)
from core.errors import ApplicationError
from workers import desired
from workers.alarms import alarm_clear, alarm_raise
from workers.models import AlarmKind, Engine, EngineAlarm
from workers.schedule_rules import (
    KEPT_POLICIES,
    in_window,
    lock_schedule_scope,
    tenant_hours,
    warmup_problems,
)

# The rules are re-exported: the fleet knows one module for warm-up (desired, tests).
__all__ = [
    "Problem",
    "WarmupWindow",
    "apply_warmup_window",
    "in_window",
    "lock_schedule_scope",
    "parse_days",
    "pool_of",
    "sync_adapter_schedule",
    "tenant_hours",
    "valid_timezone",
    "warmup_apply",
    "warmup_problems",
    "window_problems",
]

log = logging.getLogger(__name__)

TASK_NAME = "workers.schedules.apply_warmup_window"
ACTOR = "schedule"
PHASES = ("open", "close")
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab numbering, Sunday = 0


# --- beat entries ---


def entry_name(adapter: Adapter, phase: str) -> str:
    return f"warmup:{adapter.tenant.slug}/{adapter.name}:{phase}"


def entry_kwargs(adapter_id: int, phase: str) -> str:
    return json.dumps({"adapter_id": adapter_id, "phase": phase})


def _crontab(at: time, days: frozenset[int], tz: str) -> CrontabSchedule:
    spec = {
        "minute": str(at.minute),
        "hour": str(at.hour),
        "day_of_week": _render_days(days),
        "day_of_month": "*",
        "month_of_year": "*",
        "timezone": ZoneInfo(tz),
    }
    # Crontab rows are shared between entries (the admin does the same); never edited in place.
    return CrontabSchedule.objects.filter(**spec).order_by("pk").first() or (
        CrontabSchedule.objects.create(**spec)
    )


def _render_days(days: frozenset[int]) -> str:
    return "*" if len(days) == 7 else ",".join(DAY_NAMES[d] for d in sorted(days))


def _put_entry(
    adapter: Adapter, phase: str, crontab: CrontabSchedule, description: str
) -> PeriodicTask:
    name = entry_name(adapter, phase)
    wanted = {
        "task": TASK_NAME,
        "kwargs": entry_kwargs(adapter.pk, phase),
        "crontab": crontab,
        "interval": None,
        "solar": None,
        "clocked": None,
        "one_off": False,
        "description": description,
    }
    entry = PeriodicTask.objects.filter(name=name).first()
    if entry is None:
        return PeriodicTask.objects.create(name=name, enabled=True, **wanted)
    # An operator may have disabled the entry in the admin: that stays; the rest follows policy.
    if any(getattr(entry, key) != value for key, value in wanted.items()):
        for key, value in wanted.items():
            setattr(entry, key, value)
        entry.save()
    return entry


def entries_of(adapter_id: int) -> QuerySet[PeriodicTask]:
    """The beat entries that act on this adapter, under whatever name they were made."""
    return PeriodicTask.objects.filter(
        task=TASK_NAME, kwargs__in=[entry_kwargs(adapter_id, p) for p in PHASES]
    )


def sync_adapter_schedule(*, adapter: Adapter, now: datetime | None = None) -> str:
    """Make the beat entries match the policy, then apply it once after commit.

    Returns the phase applied now: a business-hours policy opens or closes at once depending on
    the clock (the entries take it from there); always_warm and pinned open; on_demand closes.
    """
    policy = adapter.warmup_policy
    with transaction.atomic():
        keep: list[int] = []
        if policy == WarmupPolicy.PRELOAD_BUSINESS_HOURS:
            window = WarmupWindow.of(adapter)
            if window_problems(window):
                raise ApplicationError(
                    "schedule.bad_window", window_problems(window)[0].message, status=409
                )
            assert window.start is not None and window.end is not None  # by window_problems
            days = parse_days(window.days) or frozenset()
            # A window over midnight closes on the day after each listed day.
            close_days = frozenset((d + 1) % 7 for d in days) if window.over_midnight else days
            what = f"Business-hours warm-up of {adapter} ({window.describe()})"
            keep = [
                _put_entry(adapter, "open", _crontab(window.start, days, window.timezone), what).pk,
                _put_entry(
                    adapter, "close", _crontab(window.end, close_days, window.timezone), what
                ).pk,
            ]
            phase = "open" if window_contains(window, now or timezone.now()) else "close"
        else:
            phase = "open" if policy in KEPT_POLICIES else "close"
        for stale in entries_of(adapter.pk).exclude(pk__in=keep):
            stale.delete()  # one by one: beat's change tracking listens to delete signals
        adapter_id = adapter.pk
        transaction.on_commit(
            lambda: apply_warmup_window.apply_async(
                kwargs={"adapter_id": adapter_id, "phase": phase}
            )
        )
    return phase


# --- applying a policy ---


def _desired() -> Any:
    return desired


def _action(policy: str, phase: str) -> str:
    """What the fleet should do now: the current policy decides, the phase only for windows.

    A stale entry (the policy changed since) therefore never warms an on-demand adapter, nor
    releases an always-warm one.
    """
    if policy == WarmupPolicy.PINNED:
        return "pin"
    if policy == WarmupPolicy.ALWAYS_WARM:
        return "warm"
    if policy == WarmupPolicy.PRELOAD_BUSINESS_HOURS and phase == "open":
        return "warm"
    return "release"


def _reason(adapter: Adapter, action: str) -> str:
    if adapter.warmup_policy == WarmupPolicy.PRELOAD_BUSINESS_HOURS:
        state = "open" if action == "warm" else "closed"
        return f"business hours {state} ({WarmupWindow.of(adapter).describe()})"
    return f"warm-up policy {adapter.warmup_policy}"


def warmup_apply(*, adapter_id: int, phase: str) -> str:
    """Carry out an adapter's policy for its active versions, if the hard rules still hold.

    Returns what happened ("warmed 2/2", "refused: schedule.pin_quota", ...), for the worker log.
    """
    if phase not in PHASES:
        log.warning("warm-up entry for adapter %s has unknown phase %r", adapter_id, phase)
        return "ignored"
    found = Adapter.objects.filter(pk=adapter_id).select_related("tenant").first()
    if found is None:
        for stale in entries_of(adapter_id):
            stale.delete()
        return "gone"
    with transaction.atomic():
        lock_schedule_scope(tenant_id=found.tenant_id, pools=[pool_of(found)])
        # Read again under the locks: the policy may have changed while this task waited.
        adapter = Adapter.objects.select_related("tenant", "base_model").get(pk=adapter_id)
        action = _action(adapter.warmup_policy, phase)
        reason = _reason(adapter, action)
        versions = list(
            AdapterVersion.objects.filter(adapter=adapter, status=VersionStatus.ACTIVE)
            .select_related("adapter__tenant", "tenant")
            .order_by("number")
        )
        if action == "release":
            for version in versions:
                _desired().release_warm(version=version, reason=reason, actor=ACTOR)
            return f"released {len(versions)}"
        problems = warmup_problems(adapter=adapter)
        if problems:
            for version in versions:
                placement_alarm(adapter=adapter, version=version, problems=problems)
            return "refused: " + ", ".join(p.code for p in problems)
        if not versions:
            return "nothing active"
        desired = _desired()
        wish = desired.desire_pinned if action == "pin" else desired.desire_warm
        done = 0
        for version in versions:
            try:
                with transaction.atomic():
                    wish(version=version, reason=reason, actor=ACTOR)
            except ApplicationError as exc:  # e.g. no engine of the pool is up right now
                placement_alarm(
                    adapter=adapter, version=version, problems=[Problem(exc.code, exc.message)]
                )
                continue
            placement_alarm_clear(version=version)
            done += 1
    return f"{'pinned' if action == 'pin' else 'warmed'} {done}/{len(versions)}"


@shared_task(name=TASK_NAME, acks_late=True, ignore_result=True)
def apply_warmup_window(adapter_id: int, phase: str) -> str:
    """Beat entry (and one-shot after a policy change): open or close an adapter's warm-up."""
    return warmup_apply(adapter_id=adapter_id, phase=phase)


# --- placement alarms ---


def placement_alarm(
    *, adapter: Adapter, version: AdapterVersion, problems: list[Problem]
) -> list[EngineAlarm]:
    """Raise (once) a placement alarm for the version on every engine of the adapter's pool."""
    pool = pool_of(adapter)
    engines = list(Engine.objects.filter(pool=pool).order_by("name"))
    if not engines:
        log.warning(
            "placement of %s refused and pool %s has no engine to alarm on: %s",
            version.served_name,
            pool,
            "; ".join(p.message for p in problems),
        )
        return []
    message = f"{adapter} ({adapter.warmup_policy}) not applied: " + " ".join(
        p.message for p in problems
    )
    details = {
        "source": ACTOR,
        "adapter": str(adapter),
        "policy": adapter.warmup_policy,
        "problems": [{"code": p.code, "message": p.message} for p in problems],
    }
    raised = [
        alarm_raise(
            engine=engine,
            kind=AlarmKind.PLACEMENT,
            subject=version.served_name,
            message=message,
            details=details,
        )
        for engine in engines
    ]
    return [alarm for alarm in raised if alarm is not None]


def placement_alarm_clear(*, version: AdapterVersion) -> int:
    """Clear the schedule's own placement alarms for the version once it has been applied."""
    engines = Engine.objects.filter(
        alarms__kind=AlarmKind.PLACEMENT,
        alarms__subject=version.served_name,
        alarms__cleared_at__isnull=True,
        alarms__details__source=ACTOR,
    ).distinct()
    return sum(
        alarm_clear(engine=engine, kind=AlarmKind.PLACEMENT, subject=version.served_name)
        for engine in engines
    )
