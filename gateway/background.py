"""The gateway's background loops (lease, change messages, measurement flush) keep going through
errors, but never through their own cancellation, and a gateway can stop them for good.

A loop that catches `Exception` to survive a Redis outage must still stop when cancelled; when a
library turns the cancellation into an ordinary error, or swallows it and returns as if nothing
happened (seen in the suite: a replica's lease loop cancelled at an event loop's shutdown went
back to sleep, and the shutdown waited for it forever), the task's own count of cancel requests
still says so. Each loop asks at every turn (`stop_if_cancelled`), and `stop_tasks` cancels
again what is still running after a grace period.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)


def stop_if_cancelled() -> None:
    """Call at each turn of a loop and in its `except Exception`: re-raise the cancellation a
    library hid (as an error, or by returning normally)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def stop_tasks(
    tasks: Iterable[asyncio.Task[None] | None], *, grace_s: float = 2.0, rounds: int = 3
) -> set[asyncio.Task[None]]:
    """Cancel `tasks` and wait for them; cancel again, up to `rounds` times, those that swallowed
    it. Returns the tasks still running (logged): an event loop closing over one would wait
    forever, so the caller knows instead."""
    running = {t for t in tasks if t is not None and not t.done()}
    for _ in range(rounds):
        if not running:
            break
        for task in running:
            task.cancel()
        _, running = await asyncio.wait(running, timeout=grace_s)
    for task in running:
        log.error("gateway: background task %r did not stop when cancelled", task)
    return running
