"""The window a moment falls in: a day, an ISO week (from Monday) or a calendar month in a time
zone, or one total window. Pure functions (no Django): boundaries are the zone's local midnight,
computed with zoneinfo, so a day with a DST change is 23 or 25 hours long and still ends at
midnight, and a month ends where the calendar says (leap years included)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

# The one window of a `total` budget: it starts at the epoch and never ends.
TOTAL_START = datetime(1970, 1, 1, tzinfo=UTC)
WINDOWS = ("day", "week", "month", "total")


@dataclass(frozen=True, slots=True)
class Span:
    """[start, end) in UTC; end is None for a total window."""

    start: datetime
    end: datetime | None

    @property
    def key(self) -> int:
        """The window's name in Redis keys and persisted rows: its start, in unix seconds."""
        return int(self.start.timestamp())


def _midnight(day: date, zone: ZoneInfo) -> datetime:
    # Local midnight of `day`; where a DST change skips midnight (a few zones), zoneinfo's fold
    # rules put it at the first instant of that day, which is where the day starts.
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


def _first_day(kind: str, local: date) -> date:
    if kind == "day":
        return local
    if kind == "week":
        return local - timedelta(days=local.weekday())
    if kind == "month":
        return local.replace(day=1)
    raise ValueError(f"unknown window {kind!r}")


def _next_first_day(kind: str, first: date) -> date:
    if kind == "day":
        return first + timedelta(days=1)
    if kind == "week":
        return first + timedelta(days=7)
    return date(first.year + first.month // 12, first.month % 12 + 1, 1)


def window_at(kind: str, at: datetime, time_zone: str = "UTC") -> Span:
    """The window of `kind` that `at` (aware) falls in, for a tenant in `time_zone`."""
    if at.tzinfo is None:
        raise ValueError("window_at needs an aware datetime")
    if kind == "total":
        return Span(TOTAL_START, None)
    zone = ZoneInfo(time_zone)
    first = _first_day(kind, at.astimezone(zone).date())
    return Span(_midnight(first, zone), _midnight(_next_first_day(kind, first), zone))
