"""The bounded wait of a request whose load every engine refused for room (gateway.request.RoomWait)."""

from __future__ import annotations

import asyncio

from gateway.request import RoomWait


def test_rounds_grow_and_stop_when_the_budget_is_spent() -> None:
    async def rounds(budget: float) -> list[float]:
        wait, out = RoomWait(budget), []
        before = wait.left
        while await wait.another_round():
            out.append(round(before - wait.left, 3))
            before = wait.left
        return out

    assert asyncio.run(rounds(1.0)) == [0.25, 0.5, 0.25]  # the last round is what was left
    assert asyncio.run(rounds(0.0)) == []  # no wait configured: give up at once
