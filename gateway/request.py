"""One request on the gateway's path, as one value: made once its caller and model are known
(the API's `generate`, the playground, an eval run's cases) and handed to each step of
gateway.app in turn: admit (the schema, the budgets, the admission's terms), choose (an engine,
the version loaded there when cold), forward (the counts on that engine, a fair slot, the
exchange, which relays the reply), settle (the measurement, the budget's tokens, the release).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import GatewayError
from gateway.exchange import STALE
from gateway.limits import Admission
from gateway.request_schema import Checked
from gateway.routes import Route, RouteTable, Target
from workers.cache_policy import Tier

Send = Callable[[dict[str, Any]], Awaitable[None]]
STALE_RETRIES = 2  # an engine that forgot the adapter: loaded there again, at most this often


@dataclass(slots=True, eq=False)
class GatewayRequest:
    kind: str  # "chat" or "completion"
    payload: dict[str, Any]  # the caller's body; the steps set what the engine is sent
    route: Route
    target: Target | None  # the version it goes to (a canary's pick); None: the base model
    table: RouteTable  # the tables it is served from (the newest once it leaves an engine)
    tenant_id: int  # the tenant it runs as: limited, pooled and billed as it
    send: Send  # the caller's ASGI send (with the budget's headers, once claimed)
    started: float  # time.perf_counter() when it came
    token_id: int | None = None  # the caller's API token (its budgets apply); None in process
    background: bool = False  # an eval run's case: it waits behind live requests for a slot
    # Set by the admit step, before any other step runs: the schema's verdict, and the
    # request's hold on the shared counts and its budgets.
    checked: Checked = field(init=False)
    admission: Admission = field(init=False)
    # Where the version was on the engine chosen last, and the wait for its load there.
    tier: Tier = Tier.NONE
    load_ms: float = 0.0
    # It led its version's load: the fleet wrote it into the pool's demand history then (the
    # recorder leaves it out: Measurement.caused_load). Kept once true, on every engine after.
    caused_load: bool = False
    # The engines it left, for the next choice and for the log.
    tried: set[str] = field(default_factory=set)
    left_out: dict[str, str] = field(default_factory=dict)  # engine -> why
    no_room: set[str] = field(default_factory=set)  # refused its load for want of a slot
    stale_retries: int = 0
    # It found no engine once and the tables were checked against Redis's generations then
    # (Gateway.serve): a change announced a moment ago is not refused from the older tables.
    rechecked: bool = False
    load_error: GatewayError | None = None
    room_wait: RoomWait | None = None
    # Tracing (gateway.tracing): the caller's own traceparent (a link, never the parent) and
    # the request's span while it is served; None while tracing is off.
    caller_traceparent: str = ""
    span: Any = None

    @property
    def base_model_id(self) -> int | None:
        return self.target.base_model_id if self.target else self.route.base_model_id

    def load_refused(self, engine: str, err: GatewayError) -> None:
        """Its version's load was refused on `engine` (no room now, or the load failed): the
        next choice leaves that engine out."""
        self.load_error = err
        self.tried.add(engine)
        self.left_out[engine] = err.code
        if err.code == "engine_busy":
            self.no_room.add(engine)

    def left(self, engine: str, sent: str) -> bool:
        """Nothing reached the caller through `engine` (`sent`: FAILED, STALE or GONE). True:
        choose again as before, the engine no longer held the adapter (its residency entry is
        dropped, so the choice loads it again, here or elsewhere, instead of failing); False:
        the engine is left out, another one next."""
        if sent == STALE and self.stale_retries < STALE_RETRIES:
            self.stale_retries += 1
            return True
        self.tried.add(engine)
        self.left_out[engine] = sent if sent != STALE else f"{sent} x{self.stale_retries + 1}"
        return False

    async def wait_for_room(self, budget_s: float) -> bool:
        """Engines refused its load for room: slots free up as requests finish, so wait a
        round (all rounds together at most `budget_s`) and let those engines be chosen again.
        False when none refused for room, or the wait is spent."""
        if not self.no_room:
            return False
        if self.room_wait is None:
            self.room_wait = RoomWait(budget_s)
        if not await self.room_wait.another_round():
            return False
        self.tried -= self.no_room
        self.no_room.clear()
        return True


class RoomWait:
    """The bounded wait of a request whose load every engine refused for room: rounds of
    growing sleeps (0.25 s doubling to 2 s) until `budget_s` is spent."""

    def __init__(self, budget_s: float) -> None:
        self.left = budget_s
        self.pause = 0.25

    async def another_round(self) -> bool:
        """Sleep before the next round; False once the budget is spent (then give up)."""
        if self.left <= 0:
            return False
        pause = min(self.pause, self.left)
        await asyncio.sleep(pause)
        self.left -= pause
        self.pause = min(2.0, self.pause * 2)
        return True
