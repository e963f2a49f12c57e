"""Database work off the gateway's event loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from channels.db import DatabaseSyncToAsync


def off_loop(func: Callable[..., Any]) -> Any:
    """`func` run in a worker thread (not the one shared thread: a long load must not hold up
    the table rebuilds), its database connection given back when it returns, so the gateway's
    threads hold no connection between calls (a pool would run dry)."""
    return DatabaseSyncToAsync(func, thread_sensitive=False)
