"""The time budgets' windows are read at. Production: the system clock. Tests and benchmarks
may name a file (BUDGET_CLOCK_OFFSET_FILE) holding an offset in seconds added to it, so a
gateway in another process crosses a window's boundary when the test says; unset, the file is
never looked at."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings


def offset_s() -> float:
    name = settings.BUDGET_CLOCK_OFFSET_FILE
    if not name:
        return 0.0
    try:
        text = Path(name).read_text().strip()
    except FileNotFoundError:
        return 0.0
    return float(text) if text else 0.0


def timestamp() -> float:
    """Unix time as budgets see it."""
    if not settings.BUDGET_CLOCK_OFFSET_FILE:
        return time.time()
    return time.time() + offset_s()


def now() -> datetime:
    return datetime.fromtimestamp(timestamp(), UTC)
