"""The gateway's threads off the event loop (gateway.offloop), with real threads: cold loads
waiting for the fleet hold threads of their own, so the short calls every request and lease beat
awaits (the tables' re-read, the budgets' steps) still run while as many loads wait as the loop's
default executor has threads, and more."""

from __future__ import annotations

import asyncio
import os
import threading

from gateway.offloop import LOAD_WAIT_THREADS, off_loop, off_loop_waiting


async def test_waiting_loads_leave_the_short_calls_their_threads():
    default_threads = min(32, (os.cpu_count() or 1) + 4)  # the loop's default executor
    loads = min(default_threads + 2, LOAD_WAIT_THREADS)  # more than it has threads
    release, lock = threading.Event(), threading.Lock()
    holding = [0]

    def wait_for_the_fleet() -> None:
        with lock:
            holding[0] += 1
        release.wait()

    waits = [asyncio.ensure_future(off_loop_waiting(wait_for_the_fleet)()) for _ in range(loads)]
    try:
        while holding[0] < len(waits):  # every wait holds its thread
            await asyncio.sleep(0.01)
        # With the loads on the default executor this call would queue behind them for as long
        # as they wait (here: until released, so it would not be done within the 30 s).
        short = asyncio.ensure_future(off_loop(lambda: 42)())
        done, _ = await asyncio.wait({short}, timeout=30)
        assert short in done and short.result() == 42
    finally:
        release.set()
        await asyncio.gather(*waits)
