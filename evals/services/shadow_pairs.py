"""Shadow pairs: while a release plan's step is shadow (weight 0, the stable alone serves the
alias), the stable's sampled live requests are asked again of the candidate in the background
lane, and each pair of answers is judged by the eval policy's judge in both orders.

The gateway does nothing more per request than for live samples (gateway.release_samples): the
scoring worker (evals.services.live_samples) hands the stable's samples of a plan in a shadow step
here, onto a Redis list that never holds more than RELEASE_SHADOW_BACKLOG (one more is skipped and
counted, never queued). A worker (evals.tasks.ask_shadow_pairs, one at a time by a lock) takes a
few, and for each:

- skips it (counted on the step, by why) when it waited longer than RELEASE_SHADOW_MAX_AGE_SECONDS
  (`stale`), when a budget that applies could not hold its worst case above the share kept for
  live traffic (`budget`: checked before asking, nothing reserved ahead of live requests), or
  when the background lane has no room (`no_room`: the admission's own rule, the answer
  `held_for_live_traffic`; asked once, never waited for);
- asks the candidate the same request through the gateway's in-process path as eval runs do
  (evals.services.asking: background lane, live requests first, at a lower CPU priority), then
  the judge in both orders with the hardening round's rules (evals.scoring.pairwise);
- counts the candidate's answer under the live checks (against the stable's sampled answers) and
  the pair's outcome on the step; keeps the pair's text when the plan keeps text;
- settles what it asked: the tokens are the tenant's usage labelled `shadow` (gateway.usage) and
  are counted against its budgets (persisted first, then Redis, as the gateway settles).

Shadow answers never leave the portal: no caller, no webhook; the release page and the samples
API show kept pairs to the tenant's eval reviewers only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from budgets import clock
from budgets.rules import BudgetRule, BudgetRules, load_rules
from budgets.spend import add_spend
from evals.models import EvalPolicy, PlanStatus, ReleasePlan, ReleaseSample, ReleaseStep
from evals.scoring import pairwise
from evals.scoring.live_checks import score_live
from evals.services.asking import (
    HELD,
    Asker,
    Side,
    _base_side,
    _judge_payload,
    _version_side,
    judge_side,
)
from evals.services.runner import at_lower_priority
from gateway.app import Gateway
from gateway.budgets import worst_case
from gateway.errors import GatewayError
from gateway.request_schema import check_request
from gateway.routes import default_plan
from gateway.usage import SHADOW_PREFIX, usage_key
from workers.redis_contract.keys import (
    BUDGETS_READY,
    RELEASE_SHADOW,
    RELEASE_SHADOW_LOCK,
    budget_key,
    ledger_key,
)
from workers.redis_contract.scripts import BUDGET_SETTLE

log = logging.getLogger(__name__)

LOCK_S = 300  # a pass that outlives this loses the lock to the next one
SHADOW_LEDGER = ledger_key("shadow-pairs")  # nothing is reserved in it: settles give back 0
# The judge's asks of a pair: about its worst case, counted in the check before asking.
JUDGE_ORDERS = 2


class Skip:
    STALE = "stale"
    BUDGET = "budget"
    NO_ROOM = "no_room"
    BACKLOG = "backlog"
    ERROR = "error"


@dataclass
class Pair:
    """One stable request of a plan in a shadow step, and what became of it."""

    item: dict[str, Any]
    plan: ReleasePlan
    step: ReleaseStep
    policy: EvalPolicy
    side: Side  # the candidate as the gateway's path takes it
    base: Side  # its base model (a judge that names it)
    candidate: str = ""
    orders: tuple[str | None, str | None] = (None, None)
    outcome: str = ""
    skipped: str = ""
    # (version id or None for the base model, prompt tokens, completion tokens) of each ask
    asked: list[tuple[int | None, int, int]] = field(default_factory=list)


def shadow_request(
    plan: ReleasePlan, step: ReleaseStep, sample: dict[str, Any], stable_answer: str
) -> dict[str, Any]:
    """What the shadow worker needs of one sampled stable request (live_samples hands it over)."""
    return {
        "plan": plan.pk,
        "step": step.index,
        "at": float(sample.get("at", 0)),
        "prompt": sample.get("prompt"),
        "params": sample.get("params") or {},
        "stable": stable_answer,
        "token_id": sample.get("token_id"),  # the stable's caller's API token: its budgets apply
    }


def hand_over(
    items: list[tuple[ReleaseStep, dict[str, Any]]], *, client: redis.Redis
) -> dict[int, dict[str, int]]:
    """Put the stable's requests on the shadow list while it has room; the rest are skipped.
    Returns the skips per step id."""
    skipped: defaultdict[int, Counter[str]] = defaultdict(Counter)
    reason = Skip.BACKLOG
    try:
        room = max(0, settings.RELEASE_SHADOW_BACKLOG - int(client.llen(RELEASE_SHADOW)))
        taken, rest = items[:room], items[room:]
        if taken:
            pipe = client.pipeline(transaction=False)
            pipe.rpush(RELEASE_SHADOW, *[json.dumps(item) for _, item in taken])
            # Two scoring workers at once may each see room: the list stays bounded anyway.
            pipe.ltrim(RELEASE_SHADOW, 0, 2 * settings.RELEASE_SHADOW_BACKLOG - 1)
            pipe.execute()
    except redis.RedisError:
        reason, rest = Skip.ERROR, items
    for step, _ in rest:
        skipped[step.pk][reason] += 1
    return {k: dict(v) for k, v in skipped.items()}


def count_skipped(step_id: int, skipped: dict[str, int]) -> None:
    _add_to(step_id, "shadow_skipped", skipped)


def _add_to(step_id: int, name: str, counts: dict[str, int]) -> None:
    """Add `counts` into the step's JSON counter `name` (row locked: workers add concurrently)."""
    if not counts:
        return
    with transaction.atomic():
        step = ReleaseStep.objects.select_for_update().get(pk=step_id)
        merged = dict(getattr(step, name) or {})
        for key, value in counts.items():
            merged[key] = int(merged.get(key, 0)) + value
        ReleaseStep.objects.filter(pk=step_id).update(**{name: merged})


# --- one pass of the worker -------------------------------------------------------------------


def pairs_ask(*, client: redis.Redis, now: float | None = None) -> dict[str, int]:
    """Take up to RELEASE_SHADOW_BATCH requests off the shadow list and ask, judge and count
    them; what happened to them, by outcome or skip."""
    lock = client.lock(RELEASE_SHADOW_LOCK, timeout=LOCK_S, blocking=False)
    if not lock.acquire():
        return {"locked": 1}
    try:
        raw = client.lpop(RELEASE_SHADOW, settings.RELEASE_SHADOW_BATCH) or []
        items = []
        for one in raw if isinstance(raw, list) else [raw]:
            try:
                items.append(json.loads(one))
            except ValueError:
                log.warning("shadow request dropped: not JSON")
        pairs, skipped = _admitted(items, client=client, now=time.time() if now is None else now)
        if pairs:
            try:
                at_lower_priority(lambda: asyncio.run(_ask_all(pairs)))
            except Exception:  # noqa: BLE001 - counted as skipped: the plan goes on
                log.warning("shadow pass failed", exc_info=True)
                for pair in pairs:
                    if not (pair.outcome or pair.skipped):
                        pair.skipped = Skip.ERROR
        _record(pairs, skipped, client=client)
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            log.warning("a shadow pass outlived its lock (%s s)", LOCK_S)
    report: Counter[str] = Counter()
    for pair in pairs:
        report[pair.skipped or pair.outcome or "unjudged"] += 1
    for counts in skipped.values():
        report.update(counts)
    return dict(report)


def _admitted(
    items: list[dict[str, Any]], *, client: redis.Redis, now: float
) -> tuple[list[Pair], dict[int, Counter[str]]]:
    """The items whose plan is still at that shadow step, less those too old or that a budget
    cannot hold; skips per step id."""
    plans = {
        p.pk: p
        for p in ReleasePlan.objects.select_related(
            "alias__tenant", "candidate__adapter__base_model", "candidate__tenant"
        ).filter(pk__in={i.get("plan") for i in items}, status=PlanStatus.RUNNING)
    }
    steps = {
        (s.plan_id, s.index): s
        for s in ReleaseStep.objects.filter(plan__in=plans.values(), weight=0)
    }
    policies = {
        p.adapter_id: p
        for p in EvalPolicy.objects.filter(
            adapter_id__in={p.candidate.adapter_id for p in plans.values()}
        )
    }
    skipped: defaultdict[int, Counter[str]] = defaultdict(Counter)
    pairs: list[Pair] = []
    rules = load_rules() if plans else BudgetRules()
    pending: Counter[str] = Counter()  # worst cases of this pass's pairs, per budget window
    for item in items:
        plan = plans.get(item.get("plan", 0))
        step = steps.get((plan.pk, plan.current_step)) if plan else None
        policy = policies.get(plan.candidate.adapter_id) if plan else None
        if plan is None or step is None or step.index != item.get("step") or policy is None:
            continue  # the plan moved on (or ended): the request is no longer this step's
        if now - float(item.get("at", 0)) > settings.RELEASE_SHADOW_MAX_AGE_SECONDS:
            skipped[step.pk][Skip.STALE] += 1
            continue
        if not _budgets_hold(plan, item, rules, pending, client=client):
            skipped[step.pk][Skip.BUDGET] += 1
            continue
        pairs.append(
            Pair(
                item, plan, step, policy, _version_side(plan.candidate), _base_side(plan.candidate)
            )
        )
    return pairs, skipped


def _payload(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The candidate's request: the stable's prompt and sampling terms, streamed with usage."""
    prompt = item.get("prompt")
    payload: dict[str, Any] = dict(item.get("params") or {})
    chat = isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt)
    payload["messages" if chat else "prompt"] = prompt
    payload.update(stream=True, stream_options={"include_usage": True})
    return ("chat" if chat else "completion"), payload


def _applying(
    plan: ReleasePlan, item: dict[str, Any], rules: BudgetRules
) -> tuple[BudgetRule, ...]:
    """The budgets a pair's tokens count against: the tenant's, the alias's and those of the
    API token that asked the stable (the sample carries its id; none for a request from
    inside the portal)."""
    token_id = item.get("token_id")
    token_id = token_id if isinstance(token_id, int) and not isinstance(token_id, bool) else None
    return rules.applying(plan.tenant_id, token_id, plan.alias.name)


def _budgets_hold(
    plan: ReleasePlan,
    item: dict[str, Any],
    rules: BudgetRules,
    pending: Counter[str],
    *,
    client: redis.Redis,
) -> bool:
    """Whether every budget that applies has the pair's worst case left above the share kept for
    live traffic (RELEASE_SHADOW_BUDGET_RESERVE of its window), counting this pass's earlier
    pairs; nothing is reserved (live requests are never refused for a shadow pair)."""
    applying = _applying(plan, item, rules)
    if not applying:
        return True
    kind, payload = _payload(item)
    try:
        checked = check_request(kind, {**payload, "model": plan.alias.name}, default_plan())
    except GatewayError:
        return False  # the stable was asked it: cannot happen short of a changed schema
    weights = rules.weights_for(plan.candidate.adapter.base_model_id)
    answer_bytes = len(str(item.get("stable", "")).encode())
    # The candidate's ask, and each judge order (the prompt, both answers and a word).
    worst = worst_case(checked, weights) * (1 + JUDGE_ORDERS) + weights.charge(
        JUDGE_ORDERS * 2 * answer_bytes, 0
    )
    at = clock.now()
    try:
        if not client.exists(BUDGETS_READY):
            return False  # the counts are being rebuilt: nothing to check against
        for rule in applying:
            span = rule.span(at)
            key = budget_key(rule.id, span.key)
            used, reserved = (int(x or 0) for x in client.hmget(key, ["used", "reserved"]))
            limit = rule.limit(span)
            left = limit - used - max(0, reserved) - pending[key]
            if left - worst < settings.RELEASE_SHADOW_BUDGET_RESERVE * limit:
                return False
    except redis.RedisError:
        return False
    for rule in applying:
        pending[budget_key(rule.id, rule.span(at).key)] += worst
    return True


async def _ask_all(pairs: list[Pair]) -> None:
    """Each pair in turn through one in-process gateway whose tables hold no budgets: the pair
    was checked against them before and is settled after (nothing reserved ahead of live)."""
    gateway = Gateway()
    try:
        gateway.table = table = replace(await gateway.fresh_table(), budgets=BudgetRules())
        askers: dict[tuple[int, int], Asker] = {}
        for pair in pairs:
            base = pair.plan.candidate.adapter.base_model_id
            key = (pair.plan.tenant_id, base)
            if key not in askers:
                askers[key] = Asker(gateway, table, pair.plan.tenant_id, base)
            await _ask_pair(askers[key], pair)
    finally:
        await gateway.aclose()


async def _ask_pair(asker: Asker, pair: Pair) -> None:
    _, payload = _payload(pair.item)
    answer = await asker.try_once(pair.side, payload)
    if answer.error:
        pair.skipped = Skip.NO_ROOM if answer.error.startswith(HELD + ":") else Skip.ERROR
        if pair.skipped == Skip.ERROR:
            log.info("shadow pair of plan %s: %s", pair.plan.pk, answer.error)
        return
    pair.candidate = answer.text
    pair.asked.append((pair.plan.candidate_id, answer.prompt_tokens, answer.completion_tokens))
    judge = judge_side(asker.table, pair.plan.tenant_id, pair.policy.judge, base=pair.base)
    if judge is None:
        return  # no judge any more: the answer counts under the live checks only
    question = _question(pair.item.get("prompt"))
    stable = str(pair.item.get("stable", ""))
    choices: list[str | None] = []
    for first, second in ((answer.text, stable), (stable, answer.text)):
        verdict = await asker.try_once(
            judge, _judge_payload(pair.policy.rubric, question, first, second)
        )
        if verdict.error:
            pair.skipped = Skip.NO_ROOM if verdict.error.startswith(HELD + ":") else Skip.ERROR
            return
        version_id = judge.target.version_id if judge.target else None
        pair.asked.append((version_id, verdict.prompt_tokens, verdict.completion_tokens))
        choices.append(pairwise.read_choice(verdict.text))
    pair.orders = (choices[0], choices[1])
    pair.outcome = pairwise.combine(choices[0], choices[1]).value


def _question(prompt: Any) -> str:
    if isinstance(prompt, list):
        users = [
            m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"
        ]
        return str(users[-1] if users else "")
    return str(prompt or "")


# --- what a pass leaves behind ----------------------------------------------------------------


def _record(pairs: list[Pair], skipped: dict[int, Counter[str]], *, client: redis.Redis) -> None:
    """The pairs' counts on their steps, kept text, then the shadow usage and budget settles."""
    now = timezone.now()
    outcomes: defaultdict[int, Counter[str]] = defaultdict(Counter)
    live: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
    skips: defaultdict[int, Counter[str]] = defaultdict(Counter, skipped)
    kept: list[ReleaseSample] = []
    for pair in pairs:
        step = pair.step
        if pair.skipped:
            skips[step.pk][pair.skipped] += 1
        if pair.outcome:
            outcomes[step.pk][pair.outcome] += 1
        if not pair.asked:
            continue
        verdicts = score_live(pair.candidate, pair.policy.live_checks or {})
        passed = all(v.passed for v in verdicts.values())
        if pair.policy.live_checks:
            live[step.pk][0] += 1
            live[step.pk][1] += int(passed)
        if pair.plan.keep_text_days and pair.outcome:
            kept.append(_kept(pair, verdicts, now))
    with transaction.atomic():
        for step_id, counts in outcomes.items():
            _add_to(step_id, "pairs", dict(counts))
        for step_id, counts in skips.items():
            _add_to(step_id, "shadow_skipped", dict(counts))
        for step_id, (n, n_passed) in live.items():
            ReleaseStep.objects.filter(pk=step_id).update(
                candidate_n=F("candidate_n") + n, candidate_passed=F("candidate_passed") + n_passed
            )
        ReleaseSample.objects.bulk_create(kept)
    _settle(pairs, client=client)


def _kept(pair: Pair, verdicts: dict[str, Any], now: datetime) -> ReleaseSample:
    prompt = pair.item.get("prompt")
    return ReleaseSample(
        tenant_id=pair.plan.tenant_id,
        plan=pair.plan,
        step=pair.step.index,
        side="pair",
        passed=pair.outcome not in (pairwise.Outcome.LOSS, pairwise.Outcome.UNREADABLE),
        verdicts={name: v.as_dict() for name, v in verdicts.items()},
        prompt=prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False),
        answer=pair.candidate,
        stable_answer=str(pair.item.get("stable", "")),
        judgement={
            "outcome": pair.outcome,
            "candidate_first": pair.orders[0],
            "candidate_second": pair.orders[1],
        },
        created_at=now,
        expires_at=now + timedelta(days=pair.plan.keep_text_days),
    )


def _settle(pairs: list[Pair], *, client: redis.Redis) -> None:
    """The asked tokens: labelled `shadow` in the tenant's usage (the in-process gateway's own
    measurement counts them in its totals), and charged to every budget that applies, persisted
    before Redis is told (the gateway's settle order)."""
    asked = [p for p in pairs if p.asked]
    if not asked:
        return
    rules = load_rules()
    at = clock.now()
    day = usage_key(datetime.now(UTC).date())
    spend: dict[tuple[int, int], int] = {}
    settles: list[tuple[list[str], int]] = []
    try:
        pipe = client.pipeline(transaction=False)
        for pair in asked:
            weights = rules.weights_for(pair.plan.candidate.adapter.base_model_id)
            charge = 0
            for version_id, prompt_tokens, completion_tokens in pair.asked:
                owner = f"{pair.plan.tenant_id}|{version_id or 0}|{SHADOW_PREFIX}"
                pipe.hincrby(day, owner + "requests", 1)
                pipe.hincrby(day, owner + "in", prompt_tokens)
                pipe.hincrby(day, owner + "out", completion_tokens)
                charge += weights.charge(prompt_tokens, completion_tokens)
            applying = _applying(pair.plan, pair.item, rules)
            keys = []
            for rule in applying:
                span = rule.span(at)
                spend[(rule.id, span.key)] = spend.get((rule.id, span.key), 0) + charge
                keys.append(budget_key(rule.id, span.key))
            if keys and charge:
                settles.append((keys, charge))
        pipe.execute()
    except redis.RedisError:
        log.warning("shadow usage not labelled (Redis)", exc_info=True)
    add_spend(spend)
    for keys, charge in settles:
        try:
            client.eval(
                BUDGET_SETTLE,
                len(keys) + 2,
                BUDGETS_READY,
                *keys,
                f"{SHADOW_LEDGER}#{uuid.uuid4().hex}",
                0,
                charge,
            )
        except redis.RedisError:
            # Persisted already: the rebuild reads BudgetSpend (never less than was used).
            log.warning("shadow spend not settled in Redis", exc_info=True)
