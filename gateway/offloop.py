"""Database work off the gateway's event loop."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.db import DatabaseSyncToAsync

# A cold load's wait (gateway.app.load_on_engine: workers.desired.request_load polls Redis until
# the fleet answers, up to FLEET_LOAD_WAIT_SECONDS) holds its thread throughout. It gets threads
# of its own: on the loop's default executor (min(32, cores + 4) threads, 6 on 2 cores) six
# waiting loads held every thread, and the short calls every request or beat awaits (the tables'
# re-read after a change message, the lease beat's budget steps, the settles' writes) queued
# behind them for seconds: requests to resident adapters waited with the engines idle and
# replicas' leases lapsed. One thread per (engine, version) loading on a replica (the gateway's
# single flight); loads beyond this many wait for one another, nothing else waits for them.
LOAD_WAIT_THREADS = 16
_load_waits = ThreadPoolExecutor(LOAD_WAIT_THREADS, thread_name_prefix="gateway-load-wait")


def off_loop(func: Callable[..., Any]) -> Any:
    """`func` run in a worker thread (not the one shared thread: a long load must not hold up
    the table rebuilds), its database connection given back when it returns, so the gateway's
    threads hold no connection between calls (a pool would run dry)."""
    return DatabaseSyncToAsync(func, thread_sensitive=False)


def off_loop_waiting(func: Callable[..., Any]) -> Any:
    """`off_loop` for a call that waits long (a cold load): on threads of its own, so that the
    short calls on the loop's default executor never queue behind it."""
    return DatabaseSyncToAsync(func, thread_sensitive=False, executor=_load_waits)
