"""Budgets on the request path: what a request reserves (its worst case) against every budget
that applies, the answers and headers that say where the tightest one stands, and the settle at
its end, persisted before it reaches Redis.

The reservation runs inside the admission script (workers/redis_contract/budget_reserve.lua,
through gateway.limits.Admission), so a budget is checked in the same atomic step as the rate
and in-flight counts: concurrent requests on any number of replicas can never together reserve
more than a budget holds. The settle (budget_settle.lua) gives back the worst case and counts
what the engine reported; a stream cut short is charged what it delivered. A request the reaper
settled at its worst case (this replica's lease lapsed while it ran) adds nothing more there, and
its persisted spend is taken back to that worst case through the reaper's notes.

Worst case, in a budget's weighted tokens: the prompt's size in bytes (every token of a
byte-level tokenizer is at least one byte; token ids count 4) plus what a chat template may add
(TEMPLATE_TOKENS, and TEMPLATE_TOKENS_PER_MESSAGE per message), times the base model's prompt
weight, plus every sequence's max_tokens (the plan's cap when the caller set none) times its
completion weight.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from redis.exceptions import RedisError

from budgets import clock
from budgets.rebuild import expire_at, persist_reaped, rebuild_counts
from budgets.rules import BudgetRule, Weights
from budgets.spend import SpendBatch, add_spend
from budgets.windows import Span
from gateway.errors import GatewayError, too_many, unavailable
from gateway.offloop import off_loop
from gateway.request_schema import Checked
from gateway.script_link import Script
from workers.redis_contract.keys import (
    BUDGETS_READY,
    BUDGETS_REAPED,
    BUDGETS_REAPED_REQUEST,
    budget_key,
)

log = logging.getLogger(__name__)

TEMPLATE_TOKENS = 32
TEMPLATE_TOKENS_PER_MESSAGE = 16


def prompt_bound(checked: Checked) -> int:
    return checked.prompt_bytes + TEMPLATE_TOKENS + TEMPLATE_TOKENS_PER_MESSAGE * checked.messages


def worst_case(checked: Checked, weights: Weights) -> int:
    return weights.charge(prompt_bound(checked), checked.weight * checked.max_tokens_each)


class Spans:
    """Each budget's current window, computed once per window (not per request)."""

    def __init__(self) -> None:
        self._spans: dict[tuple[int, str, str], Span] = {}

    def of(self, rule: BudgetRule, now: datetime) -> Span:
        key = (rule.id, rule.window, rule.time_zone)
        span = self._spans.get(key)
        if span is None or now < span.start or (span.end is not None and now >= span.end):
            span = rule.span(now)
            self._spans[key] = span
        return span


@dataclass
class BudgetClaim:
    """One request's hold on its budgets, from admission to settle."""

    rules: tuple[BudgetRule, ...]
    spans: tuple[Span, ...]
    worst: int
    weights: Weights
    now: float
    prompt_bound: int = 0  # the prompt's tokens at most (bytes and the template's)
    keys: list[str] = field(default_factory=list)
    tightest: int = 0  # index into rules, once admitted
    remaining: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    delivered: bool = False  # the engine answered (tokens above are what it reported)

    def __post_init__(self) -> None:
        self.keys = [
            budget_key(rule.id, span.key) for rule, span in zip(self.rules, self.spans, strict=True)
        ]

    def script_keys(self) -> list[str]:
        return [BUDGETS_READY, *self.keys]

    def script_args(self) -> list[str | int]:
        return [
            len(self.rules),
            self.worst,
            *(rule.limit(span) for rule, span in zip(self.rules, self.spans, strict=True)),
            *(expire_at(span) for span in self.spans),
        ]

    def reset_in(self, index: int) -> int | None:
        end = self.spans[index].end
        return None if end is None else max(1, math.ceil(end.timestamp() - self.now))

    def headers(self) -> dict[str, str]:
        """x-budget-* of the tightest budget (the one with the least left)."""
        rule = self.rules[self.tightest]
        out = {
            "x-budget-limit": str(rule.limit(self.spans[self.tightest])),
            "x-budget-remaining": str(max(0, self.remaining or 0)),
        }
        reset = self.reset_in(self.tightest)
        if reset is not None:
            out["x-budget-reset"] = str(reset)
        return out

    def admitted(self, tightest: int, remaining: int) -> None:
        self.tightest, self.remaining = tightest - 1, remaining

    def refusal(self, index: int, left: int) -> GatewayError:
        """429 budget_exceeded naming the budget's scope, Retry-After until its window resets."""
        rule = self.rules[index - 1]
        reset = self.reset_in(index - 1)
        self.tightest, self.remaining = index - 1, left
        when = f"; it resets in {reset} s" if reset is not None else "; it does not reset"
        err = too_many(
            f"Budget exceeded for scope '{rule.scope}' ({rule.window}): this request may use up "
            f"to {self.worst} tokens and {max(0, left)} of {rule.limit(self.spans[index - 1])} "
            f"are left{when}. "
            "Lower max_tokens, or ask the tenant's owner to raise the budget.",
            retry_after=reset or 0,
            code="budget_exceeded",
        )
        if reset is None:
            err.headers.pop("retry-after", None)
        err.headers.update(self.headers())
        return err

    def delivered_tokens(self, prompt_tokens: int, completion_tokens: int) -> None:
        """What the engine reported; a stream cut before its usage chunk has no prompt count:
        the prompt's bound is charged then (it reached the engine)."""
        self.delivered = True
        self.prompt_tokens = prompt_tokens or (self.prompt_bound if completion_tokens else 0)
        self.completion_tokens = completion_tokens

    def charge(self) -> int:
        if not self.delivered:
            return 0
        return self.weights.charge(self.prompt_tokens, self.completion_tokens)

    def spend(self) -> SpendBatch:
        used = self.charge()
        return {
            (rule.id, span.key): used for rule, span in zip(self.rules, self.spans, strict=True)
        }


def budgets_unavailable() -> GatewayError:
    return unavailable(
        "The gateway cannot check this tenant's budgets right now (their counts are being "
        "rebuilt); try again shortly.",
        code="budget_unavailable",
        retry_after=1,
    )


def claim_for(
    applying: tuple[BudgetRule, ...], weights: Weights, spans: Spans, checked: Checked
) -> BudgetClaim:
    """The request's hold on the budgets that apply to it (BudgetRules.applying: never empty
    here), its worst case in `weights` (its base model's price card)."""
    stamp = clock.timestamp()
    now = datetime.fromtimestamp(stamp, UTC)
    return BudgetClaim(
        rules=applying,
        spans=tuple(spans.of(rule, now) for rule in applying),
        worst=worst_case(checked, weights),
        weights=weights,
        now=stamp,
        prompt_bound=prompt_bound(checked),
    )


def with_headers(send: Any, claim: BudgetClaim) -> Any:
    """`send` with the claim's x-budget-* headers added to the response's start."""

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and claim.remaining is not None:
            extra = [(k.encode(), v.encode()) for k, v in claim.headers().items()]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sending


@dataclass
class _Settle:
    claim: BudgetClaim
    ledger: str
    persisted: bool = False


class BudgetSettler:
    """Settles ended requests in batches: their spend added to BudgetSpend first (one database
    transaction per batch, off the event loop), then each settle script. A settle Redis did not
    take (away, or not rebuilt yet) is kept and sent again; one the database did not take is kept
    with its reservation still held in Redis (never less than was used)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.queue: list[_Settle] = []
        self._wake = asyncio.Event()
        self.rebuilding: asyncio.Task[Any] | None = None
        # One flush at a time: the settle loop and the lease beat's rebuild both flush, and two
        # at once took the same batch: its spend persisted twice, each settle sent twice.
        self._flushing = asyncio.Lock()

    def settle(self, claim: BudgetClaim, ledger: str) -> None:
        self.queue.append(_Settle(claim, ledger))
        self._wake.set()

    async def flush(self) -> int:
        """Persist and settle what waits; how many settled."""
        async with self._flushing:
            return await self._flush()

    async def _flush(self) -> int:
        batch = list(self.queue)
        if not batch:
            return 0
        fresh = [s for s in batch if not s.persisted]
        if fresh:
            spend: SpendBatch = {}
            for item in fresh:
                for key, used in item.claim.spend().items():
                    spend[key] = spend.get(key, 0) + used
            await off_loop(add_spend)(spend)
            for item in fresh:
                item.persisted = True
        # Every settle of the batch in one round trip; each one's answer says whether it took.
        try:
            answers = await self.script.many(
                [
                    (
                        [*s.claim.script_keys(), s.ledger],
                        [s.claim.worst, s.claim.charge(), BUDGETS_REAPED_REQUEST, BUDGETS_REAPED],
                    )
                    for s in batch
                ]
            )
        except RedisError:
            return 0
        settled = {id(s) for s, answer in zip(batch, answers, strict=True) if answer == 0}
        if any(answer == -1 for answer in answers):
            self.rebuild_soon()
        self.queue = [s for s in self.queue if id(s) not in settled]
        return len(settled)

    async def run_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(settings.GATEWAY_BUDGET_SETTLE_SECONDS)
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - kept: the lease beat sends it again
                log.warning("gateway: budget settles wait (%d)", len(self.queue), exc_info=True)

    def rebuild_soon(self) -> None:
        """Rebuild the budgets' counts now, in the background (one at a time per replica)."""
        if self.rebuilding is None or self.rebuilding.done():
            self.rebuilding = asyncio.create_task(self.rebuild())

    async def rebuild(self) -> int | None:
        """The lease beat's step: the reaper's notes persisted, the counts rebuilt when Redis
        lost them, then what waits settled."""
        await off_loop(persist_reaped)()
        written = await off_loop(rebuild_counts)()
        if self.queue:
            await self.flush()
        return written
