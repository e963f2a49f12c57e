"""A warm-up window as the registry stores it on an adapter: crontab days, local start and end,
an IANA time zone; whether one is well formed, and whether it is open at a moment.

The registry checks its own fields with these; the fleet's hard rules (workers.schedule_rules)
and beat entries (workers.schedules) read the same window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time
from functools import lru_cache
from zoneinfo import ZoneInfo, available_timezones

from celery.schedules import crontab_parser
from django.core.exceptions import ValidationError
from django_celery_beat.validators import day_of_week_validator

from adapters.models import Adapter


@dataclass(frozen=True)
class Problem:
    """A hard rule a policy would break; `field` names the adapter field to fix, if one does."""

    code: str
    message: str
    field: str = ""


@dataclass(frozen=True)
class WarmupWindow:
    """A business-hours window: crontab days, local start and end, IANA time zone."""

    days: str
    start: time | None
    end: time | None
    timezone: str

    @classmethod
    def of(cls, adapter: Adapter) -> WarmupWindow:
        return cls(
            days=adapter.warmup_days,
            start=adapter.warmup_start,
            end=adapter.warmup_end,
            timezone=adapter.warmup_timezone,
        )

    @property
    def over_midnight(self) -> bool:
        return self.start is not None and self.end is not None and self.end < self.start

    def describe(self) -> str:
        start = self.start.strftime("%H:%M") if self.start else "?"
        end = self.end.strftime("%H:%M") if self.end else "?"
        return f"{self.days} {start}-{end} {self.timezone}"


@lru_cache(maxsize=1)
def _known_timezones() -> frozenset[str]:
    # The keys zoneinfo and django-celery-beat's TimeZoneField both accept; ZoneInfo() alone
    # also opens odd files such as "posixrules" or "localtime".
    return frozenset(available_timezones())


def valid_timezone(name: str) -> bool:
    return name in _known_timezones()


def parse_days(days: str) -> frozenset[int] | None:
    """Crontab day_of_week -> days (Sunday = 0), or None when beat would not accept it.

    Both parsers must agree: celery's decides when beat fires, django-celery-beat's validates
    the entry when an operator saves it in the admin ("fri-mon" passes one and fails the other).
    """
    try:
        day_of_week_validator(days)
        return frozenset(crontab_parser(7).parse(days))
    except (ValidationError, ValueError):
        return None


def window_problems(window: WarmupWindow) -> list[Problem]:
    out: list[Problem] = []
    if window.start is None:
        out.append(_bad_window("warmup_start", "a business-hours window needs a start time."))
    if window.end is None:
        out.append(_bad_window("warmup_end", "a business-hours window needs an end time."))
    if window.start is not None and window.start == window.end:
        out.append(
            _bad_window(
                "warmup_end",
                f"the window starts and ends at {window.start:%H:%M}; an empty window would never "
                "warm, and a full day is the always_warm policy.",
            )
        )
    if not valid_timezone(window.timezone):
        out.append(
            _bad_window(
                "warmup_timezone",
                f"'{window.timezone}' is not an IANA time zone (e.g. Europe/Berlin, UTC).",
            )
        )
    if not parse_days(window.days):
        out.append(
            _bad_window(
                "warmup_days",
                f"'{window.days}' is not a crontab day_of_week (e.g. mon-fri, sat,sun, 1-5; "
                "Sunday is 0; a range may not wrap past Saturday).",
            )
        )
    return out


def _bad_window(field: str, message: str) -> Problem:
    return Problem("schedule.bad_window", f"{field}: {message}", field)


def window_contains(window: WarmupWindow, now: datetime) -> bool:
    """Whether `now` falls in [start, end) local time on a listed day.

    A window over midnight belongs to the day it starts on: "fri 22:00-02:00" covers Saturday
    01:00. Wall-clock times come from zoneinfo, so DST changes move the window with the clock.
    """
    days = parse_days(window.days)
    if window.start is None or window.end is None or not days or window.start == window.end:
        return False
    if not valid_timezone(window.timezone):
        return False
    local = now.astimezone(ZoneInfo(window.timezone))
    clock = local.time().replace(tzinfo=None)
    today = _cron_day(local)
    if not window.over_midnight:
        return today in days and window.start <= clock < window.end
    if clock >= window.start:
        return today in days
    return clock < window.end and (today - 1) % 7 in days


def _cron_day(moment: datetime) -> int:
    return (moment.weekday() + 1) % 7  # Python: Monday = 0; crontab: Sunday = 0
