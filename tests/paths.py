"""Where a test run keeps its files and which Redis database it uses.

Under pytest-xdist each worker gets its own: the first (gw0, or a run without xdist) var/test and
Redis database 15 (or REDIS_URL's), worker gwN var/test-gwN and the database N below. PostgreSQL
needs nothing here: pytest-django names each worker's test database after the worker.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = os.environ.get("PYTEST_XDIST_WORKER") or "gw0"
WORKER_INDEX = int(WORKER.removeprefix("gw") or 0)
TEST_VAR = REPO / "var" / ("test" if WORKER_INDEX == 0 else f"test-{WORKER}")


def worker_redis_url(url: str) -> str:
    """`url` with its database number moved down by the worker's index (15 -> 14 for gw1)."""
    if WORKER_INDEX == 0:
        return url
    base, _, db = url.rpartition("/")
    if not db.isdigit() or int(db) < WORKER_INDEX:
        raise RuntimeError(f"REDIS_URL {url!r} leaves no database for pytest-xdist {WORKER}")
    return f"{base}/{int(db) - WORKER_INDEX}"
