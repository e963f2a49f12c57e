"""Windows in the tenant's time zone: boundaries at local midnight, DST days, month ends, leap
years, ISO weeks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from budgets.windows import TOTAL_START, window_at


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_it_gives_the_utc_day():
    span = window_at("day", utc(2026, 3, 4, 23, 59, 59))
    assert span.start == utc(2026, 3, 4) and span.end == utc(2026, 3, 5)


def test_it_starts_the_day_at_local_midnight():
    # 23:30 UTC on the 4th is already the 5th in Berlin (UTC+1 in winter).
    span = window_at("day", utc(2026, 3, 4, 23, 30), "Europe/Berlin")
    assert span.start == utc(2026, 3, 4, 23) and span.end == utc(2026, 3, 5, 23)


def test_a_spring_forward_day_is_23_hours_and_ends_at_midnight():
    span = window_at("day", utc(2026, 3, 29, 12), "Europe/Berlin")
    assert span.start == utc(2026, 3, 28, 23)  # midnight CET
    assert span.end == utc(2026, 3, 29, 22)  # midnight CEST
    assert span.end - span.start == timedelta(hours=23)


def test_a_fall_back_day_is_25_hours():
    span = window_at("day", utc(2026, 11, 1, 12), "America/New_York")
    assert span.start == utc(2026, 11, 1, 4) and span.end == utc(2026, 11, 2, 5)
    assert span.end - span.start == timedelta(hours=25)


def test_the_instant_of_a_boundary_belongs_to_the_next_window():
    before = window_at("day", utc(2026, 3, 5) - timedelta(microseconds=1))
    at = window_at("day", utc(2026, 3, 5))
    assert before.end == at.start == utc(2026, 3, 5)


def test_the_week_starts_on_monday_in_the_zone():
    # Sunday 2026-03-08 22:00 UTC is Monday 07:00 in Tokyo: a new ISO week there.
    span = window_at("week", utc(2026, 3, 8, 22), "Asia/Tokyo")
    assert span.start == utc(2026, 3, 8, 15) and span.end == utc(2026, 3, 15, 15)
    assert window_at("week", utc(2026, 3, 8, 22)).start == utc(2026, 3, 2)


def test_a_week_across_a_dst_change_is_167_hours():
    span = window_at("week", utc(2026, 3, 25), "Europe/Berlin")
    assert span.end is not None and span.end - span.start == timedelta(hours=167)


@pytest.mark.parametrize(
    ("at", "start", "end"),
    [
        (utc(2026, 1, 31, 12), utc(2026, 1, 1), utc(2026, 2, 1)),
        (utc(2028, 2, 29, 23, 59), utc(2028, 2, 1), utc(2028, 3, 1)),  # leap year
        (utc(2027, 2, 28, 12), utc(2027, 2, 1), utc(2027, 3, 1)),
        (utc(2026, 12, 31, 23, 59, 59), utc(2026, 12, 1), utc(2027, 1, 1)),  # year end
    ],
)
def test_the_calendar_month(at, start, end):
    span = window_at("month", at)
    assert (span.start, span.end) == (start, end)


def test_a_month_in_a_zone_behind_utc():
    # 2026-04-01 02:00 UTC is still March 31st in Los Angeles.
    span = window_at("month", utc(2026, 4, 1, 2), "America/Los_Angeles")
    assert span.start == utc(2026, 3, 1, 8)  # PST midnight
    assert span.end == utc(2026, 4, 1, 7)  # PDT midnight


def test_a_total_window_never_ends():
    span = window_at("total", utc(2031, 5, 5))
    assert span.start == TOTAL_START and span.end is None and span.key == 0


def test_it_refuses_a_naive_time_and_an_unknown_window():
    with pytest.raises(ValueError):
        window_at("day", datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        window_at("year", utc(2026, 1, 1))
