"""An eval run's cases asked through the gateway's own request path, in process (as the
playground does): admission (rate, the tenant's in-flight cap, billed to the tenant), engine
choice and single-flight cold load, fair slots at background priority (live requests go first),
failover. Temperature 0 and a fixed seed, so an answer is the version's, not the sampler's.

Each case goes to the candidate and to what served the alias when the run started (`baseline`:
a version, or the base model), and to the pairwise judge in both orders when the policy names
one. A refusal or an engine that went away fails that side of the case with the reason; the run
goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from adapters.models import AdapterVersion
from core.errors import ApplicationError
from evals.models import CaseSide, EvalRun
from evals.scoring import pairwise
from evals.services.runs import run_record_case
from gateway.app import Gateway
from gateway.errors import GatewayError
from gateway.lanes import background_room as lane_room
from gateway.playground import TokenSink
from gateway.request import GatewayRequest
from gateway.routes import Route, RouteTable, Target
from gateway.routes import _target as target_of

log = logging.getLogger(__name__)

HELD = "held_for_live_traffic"  # gateway.errors.held_for_live: the engine keeps room for live ones
HELD_WAIT_S = 1800.0  # the longest one side waits for it (live load past the headroom)
JUDGE_MAX_TOKENS = 8  # "TIE" and the end of the reply, in any tokenizer the choice constraint uses


@dataclass(frozen=True)
class Side:
    """One model the run asks: how the gateway's request path takes it."""

    name: str  # what the run names it by (candidate label, baseline, judge)
    route: Route
    target: Target | None


@dataclass
class Answer:
    text: str = ""
    error: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0


def _version_side(version: AdapterVersion) -> Side:
    target = target_of(version)
    return Side(target.label, Route(target.label, (target,)), target)


def _base_side(version: AdapterVersion) -> Side:
    base = version.adapter.base_model
    return Side("base", Route(base.name, base_model_id=base.pk), None)


def _sides(run: EvalRun, candidate: AdapterVersion) -> tuple[Side, Side]:
    """The candidate, and the baseline the run named at its start."""
    baseline = _base_side(candidate)
    name, sep, number = run.baseline.partition("@")
    if sep:
        version = (
            AdapterVersion.objects.select_related(
                "adapter__tenant", "tenant", "adapter__base_model"
            )
            .filter(adapter_id=candidate.adapter_id, number=int(number))
            .first()
        )
        if version is not None:
            baseline = _version_side(version)
    return _version_side(candidate), baseline


def _judge_side(table: RouteTable, run: EvalRun, base: Side) -> Side | None:
    """The judge the run's policy named (judge_side)."""
    return judge_side(table, run.tenant_id, str(run.policy.get("judge") or ""), base=base)


def judge_side(
    table: RouteTable,
    tenant_id: int,
    judge: str,
    candidate: AdapterVersion | None = None,
    *,
    base: Side | None = None,
) -> Side | None:
    """The judge a policy names, as the tenant may call it: one of its routes (from the
    gateway's tables, as /v1/ resolves it) or the base model (`base`, or the candidate's);
    None when it names nothing."""
    if not judge:
        return None
    route = table.route_for(tenant_id, judge)
    if route is not None:
        target = route.targets[0] if route.targets else None
        return Side(judge, route, target)
    if base is None and candidate is not None:
        base = _base_side(candidate)
    if base is not None and judge == base.route.name:
        return base
    return Side(judge, Route(judge), None)  # refused when asked: the judge's rows say why


def _payload(case: dict[str, Any], messages: list[dict[str, str]] | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "max_tokens": int(case.get("max_tokens") or 64),
        "temperature": 0,
        "seed": settings.EVAL_RUN_SEED,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if messages is not None:
        payload["messages"] = messages
    elif "messages" in case:
        payload["messages"] = case["messages"]
    else:
        payload["prompt"] = case["prompt"]
    return payload


def _question(case: dict[str, Any]) -> str:
    if "prompt" in case:
        return str(case["prompt"])
    users = [m["content"] for m in case["messages"] if m.get("role") == "user"]
    return str(users[-1] if users else case["messages"][-1]["content"])


def background_room(table: RouteTable, base_model_id: int | None) -> int:
    """The slots background requests may hold on the base model's engines while nothing else
    runs there: each engine's slots less GATEWAY_LIVE_HEADROOM (at least one), on every engine
    but the roomiest when there are several, which live requests keep to themselves (background
    requests pack onto the engines they run on, live ones keep off those:
    docs/decisions/0012-live-and-background-keep-apart.md). 0: no engine."""
    rooms = sorted(
        lane_room(e)
        for e in table.engines
        if base_model_id is None or e.base_model_id == base_model_id
    )
    return sum(rooms[:-1]) if len(rooms) > 1 else sum(rooms)


class Asker:
    """One run's way into the gateway: one Gateway in this process, its tables, a bound on the
    run's requests in flight."""

    def __init__(
        self, gateway: Gateway, table: RouteTable, tenant_id: int, base_model_id: int | None = None
    ) -> None:
        self.gateway = gateway
        self.table = table
        self.tenant_id = tenant_id
        cap = table.in_flight_caps.get(tenant_id, 0)
        bound = settings.EVAL_RUN_CONCURRENCY
        # Within the tenant's in-flight cap, leaving live traffic room under it.
        bound = max(1, min(bound, cap // 2)) if cap else bound
        # And within what the live headroom leaves background requests on the base model's
        # engines but one: more would only wait there, asking again (held_for_live_traffic), or
        # spill onto the engine live requests keep to.
        room = background_room(table, base_model_id)
        self.bound = max(1, min(bound, room)) if room else bound
        self.limit = asyncio.Semaphore(self.bound)

    async def ask(self, side: Side, payload: dict[str, Any]) -> Answer:
        """One side's answer. While the engine keeps its headroom for live requests (503
        `held_for_live_traffic`, nothing held) it waits and asks again, holding its place in the
        run's bound, for at most HELD_WAIT_S."""
        if side.route.base_model_id is None and not side.route.targets:
            return Answer(error=f"model_not_found: '{side.name}' is no model the tenant may call")
        async with self.limit:
            deadline = time.monotonic() + HELD_WAIT_S
            pause = 0.01
            while True:
                answer = await self._ask_once(side, payload)
                if not answer.error.startswith(HELD + ":") or time.monotonic() > deadline:
                    return answer
                await asyncio.sleep(pause)
                pause = min(0.1, pause * 2)

    async def try_once(self, side: Side, payload: dict[str, Any]) -> Answer:
        """One ask that never waits for room: when the run's bound is full, or the engine keeps
        its headroom for live requests, it comes back `held_for_live_traffic` at once (a shadow
        pair is then skipped, evals.services.shadow_pairs)."""
        if side.route.base_model_id is None and not side.route.targets:
            return Answer(error=f"model_not_found: '{side.name}' is no model the tenant may call")
        if self.limit.locked():
            return Answer(error=f"{HELD}: the background bound ({self.bound}) is full")
        async with self.limit:
            return await self._ask_once(side, payload)

    async def _ask_once(self, side: Side, payload: dict[str, Any]) -> Answer:
        kind = "chat" if "messages" in payload else "completion"
        payload = {**payload, "model": side.name}
        started = time.perf_counter()
        pieces: list[str] = []

        async def on_token(text: str) -> None:
            pieces.append(text)

        sink = TokenSink(on_token, started)
        try:
            await self.gateway.serve_admitted(
                GatewayRequest(
                    kind,
                    payload,
                    side.route,
                    side.target,
                    self.table,
                    self.tenant_id,
                    send=sink,
                    started=started,
                    background=True,
                )
            )
        except GatewayError as err:
            return Answer(error=f"{err.code}: {err.message}")
        except ApplicationError as err:
            return Answer(error=f"{err.code}: {err.message}")
        except Exception as exc:  # noqa: BLE001 - this side fails with the reason, the run goes on
            log.warning("eval %s: %s failed: %r", self.tenant_id, side.name, exc)
            return Answer(error=f"internal_error: {type(exc).__name__}: {exc}"[:2000])
        latency = (time.perf_counter() - started) * 1000
        if sink.error is not None:
            return Answer(error=f"{sink.error[0]}: {sink.error[1]}", latency_ms=latency)
        return Answer(
            "".join(pieces), "", sink.prompt_tokens, sink.completion_tokens or sink.pieces, latency
        )


_record = database_sync_to_async(run_record_case)


async def _case(
    asker: Asker,
    run: EvalRun,
    case: dict[str, Any],
    sides: dict[str, Side],
    judge: Side | None,
    done: set[tuple[str, str]],
    rubric: str,
) -> None:
    answers: dict[str, Answer] = {}

    async def one(side_name: str) -> None:
        side = sides[side_name]
        answer = await asker.ask(side, _payload(case))
        answers[side_name] = answer
        await _record(
            run=run,
            case=case,
            side=side_name,
            answer=answer.text,
            error=answer.error,
            prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens,
            latency_ms=answer.latency_ms,
        )

    await asyncio.gather(*(one(name) for name in sides if (case["id"], name) not in done))
    if judge is None or (case["id"], CaseSide.JUDGE) in done:
        return
    if len(answers) < 2:  # one side was recorded by an earlier attempt: read it back
        answers.update(await database_sync_to_async(_recorded_answers)(run, case["id"]))
    candidate, baseline = answers[CaseSide.CANDIDATE], answers[CaseSide.BASELINE]
    if candidate.error or baseline.error:
        verdict, error = "", "judge not asked: a side has no answer"
    else:
        question = _question(case)
        orders = await asyncio.gather(
            asker.ask(judge, _judge_payload(rubric, question, candidate.text, baseline.text)),
            asker.ask(judge, _judge_payload(rubric, question, baseline.text, candidate.text)),
        )
        error = next((o.error for o in orders if o.error), "")
        verdict = (
            ""
            if error
            else pairwise.combine(
                pairwise.read_choice(orders[0].text), pairwise.read_choice(orders[1].text)
            ).value
        )
    await _record(run=run, case=case, side=CaseSide.JUDGE, answer=verdict, error=error)


def _judge_payload(rubric: str, question: str, first: str, second: str) -> dict[str, Any]:
    """One order's judgement: the answers quoted under a nonce of its own, and the reply
    constrained to A, B or TIE with vLLM 0.32's `structured_outputs` (its older
    `guided_choice` is ignored by that engine: docs/evals.md)."""
    messages = pairwise.judge_messages(
        rubric=rubric,
        question=question,
        first=first,
        second=second,
        nonce=pairwise.new_nonce(),
    )
    return {
        **_payload({"max_tokens": JUDGE_MAX_TOKENS}, messages),
        "structured_outputs": pairwise.choice_constraint(),
    }


def _recorded_answers(run: EvalRun, case_id: str) -> dict[str, Answer]:
    return {
        row.side: Answer(row.answer, row.error)
        for row in run.results.filter(case_id=case_id, side__in=list(CaseSide.values))
    }


@dataclass
class RunContext:
    sides: dict[str, Side]
    base: Side
    done: set[tuple[str, str]]
    cases: list[dict[str, Any]]


def _context(run: EvalRun, candidate: AdapterVersion) -> RunContext:
    candidate_side, baseline_side = _sides(run, candidate)
    return RunContext(
        sides={CaseSide.CANDIDATE: candidate_side, CaseSide.BASELINE: baseline_side},
        base=_base_side(candidate),
        done=set(run.results.values_list("case_id", "side")),
        cases=list(run.suite_version.cases),
    )


async def ask_cases(run: EvalRun, candidate: AdapterVersion) -> int:
    """Every case of the run not yet recorded, both sides (and the judge), at most the run's
    bound in flight; returns that bound when each is recorded."""
    context = await database_sync_to_async(_context)(run, candidate)
    gateway = Gateway()
    try:
        table = await gateway.fresh_table()
        asker = Asker(gateway, table, run.tenant_id, candidate.adapter.base_model_id)
        judge = _judge_side(table, run, context.base)
        rubric = str(run.policy.get("rubric") or "")
        await asyncio.gather(
            *(
                _case(asker, run, case, context.sides, judge, context.done, rubric)
                for case in context.cases
            )
        )
        return asker.bound
    finally:
        await gateway.aclose()
