"""The release controller: one pass over the running plans (beat), each judged on its current
step's guards and moved at most once.

Guards, each a test with a stated error rate (evals.scoring.release_stats), over what the step
saw since it began:
- `live_checks`: the share of sampled live answers passing the adapter's live checks, candidate
  against stable (counts kept on the step by evals.services.live_samples); only when the
  candidate's eval policy sets live checks.
- `errors`: the share of requests answered without an engine error, candidate against stable,
  from the gateway's per-minute counts in Redis (the measurements the canary check reads).
- `latency`: the candidate's mean TTFT against the alias's `max_ttft_ms` (the existing canary
  check's threshold, adapters.services.releases.canary_verdict), when the alias sets one (not
  in a shadow step: no caller waits for the candidate there).
- `pairs` (a shadow step only): the judge's outcomes over the step's shadow pairs
  (evals.services.shadow_pairs), P(win) - P(loss or unreadable) against 0 and -margin
  (release_stats.judge_pairs). In a shadow step `live_checks` scores the candidate's shadow
  answers and `errors` its shadow requests' engine errors.

A step advances when its minimum time has passed and every guard says advance; a guard that says
rollback rolls the plan back at once (any time); otherwise it holds. The move is claimed by a
conditional update (evals.services.release_plans.claim) inside the transaction that moves the
weights: a worker killed before the commit leaves nothing done, and the next pass decides again;
two workers on one step take one decision between them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis
from django.db import transaction
from django.utils import timezone

from adapters.models import VersionStatus
from adapters.services.releases import Guard, canary_series, canary_verdict, window_minutes
from core import telemetry
from core.errors import ApplicationError
from evals.models import EvalPolicy, PlanStatus, ReleasePlan, ReleaseStep
from evals.scoring.pairwise import Outcome
from evals.scoring.release_stats import (
    Counts,
    Decision,
    GuardTest,
    GuardVerdict,
    PairCounts,
    combine,
    judge,
    judge_pairs,
)
from evals.services.release_events import plan_changed
from evals.services.release_plans import CONTROLLER, move_to_next, roll_back, version_label

log = logging.getLogger(__name__)
PAIR_OUTCOMES = frozenset(o.value for o in Outcome)


@dataclass(frozen=True, slots=True)
class PlanPass:
    plan: int
    step: int
    decision: str  # advance, complete, rollback, hold, or "" when another worker moved it
    reason: str


def step_guards(
    plan: ReleasePlan, step: ReleaseStep, *, client: redis.Redis | None, now: float
) -> dict[str, GuardVerdict]:
    test = GuardTest(alpha=plan.alpha, margin=plan.margin, min_samples=plan.min_step_samples)
    guards: dict[str, GuardVerdict] = {}
    policy = EvalPolicy.objects.filter(adapter_id=plan.candidate.adapter_id).first()
    if policy is not None and policy.live_checks:
        guards["live_checks"] = judge(
            Counts(step.candidate_n, step.candidate_passed),
            Counts(step.stable_n, step.stable_passed),
            test,
        )
    if step.weight == 0:  # shadow: the candidate's pairs against the stable's answers
        known = {k: int(v) for k, v in (step.pairs or {}).items() if k in PAIR_OUTCOMES}
        guards["pairs"] = judge_pairs(PairCounts(**known), test)
    if client is not None:
        since = (step.started_at or plan.step_started_at).timestamp()
        minutes = window_minutes(now=now, window=24 * 60, since=since)
        # The minute the step began counts too: a step's first requests fall in it, and
        # before the step the version's counts (of the stable) are the same rates anyway.
        minutes = range(min(minutes.start, int(since // 60)), minutes.stop)
        sides = {
            side: canary_series(
                client,
                tenant=plan.alias.tenant.slug,
                adapter=version.adapter.name,
                version=version_label(version),
                minutes=minutes,
            )
            for side, version in (("candidate", plan.candidate), ("stable", plan.stable))
        }

        def answered(side: str) -> Counts:
            n = sum(m.requests for m in sides[side])
            return Counts(n, n - min(n, sum(m.errors for m in sides[side])))

        guards["errors"] = judge(answered("candidate"), answered("stable"), test)
        alias = plan.alias
        # A shadow step's candidate answers in the background lane, seen by no caller: its
        # latency is no caller's.
        if alias.max_ttft_ms is not None and step.weight > 0:
            guards["latency"] = _latency(sides["candidate"], alias.max_ttft_ms, test.min_samples)
    return guards


def _latency(series: list[Any], max_ttft_ms: int, min_requests: int) -> GuardVerdict:
    guard = Guard(1.0, float(max_ttft_ms), max(1, min_requests), 1)
    v = canary_verdict(series, guard)
    n = sum(m.ttft_count for m in series)
    decision = (
        Decision.ROLLBACK
        if v.rollback
        else (Decision.HOLD if v.requests < guard.min_requests else Decision.ADVANCE)
    )
    return GuardVerdict(
        decision,
        v.reason,
        v.mean_ttft_ms,
        None,
        float(max_ttft_ms),
        Counts(n, n),
        Counts(),
        0.0,
        0.0,
    )


def plans_tick(*, client: redis.Redis | None, now: float | None = None) -> list[PlanPass]:
    """One pass over every running plan."""
    now = time.time() if now is None else now
    running = ReleasePlan.objects.filter(status=PlanStatus.RUNNING).order_by("pk")
    passes = []
    for plan in running:
        try:
            passes.append(plan_tick(plan.pk, client=client, now=now))
        except ApplicationError as exc:  # one plan's refusal never stops the others
            log.warning("release plan %s: %s", plan.pk, exc.message)
            passes.append(PlanPass(plan.pk, plan.current_step, "", exc.code))
    return passes


def plan_tick(plan_id: int, *, client: redis.Redis | None, now: float) -> PlanPass:
    """One plan judged and moved at most once: a span of its own (`lora_portal.release_plan.
    decision`, linked to the candidate's upload trace) with the plan's, the step's and each
    guard's figures and the decision taken (docs/observability.md)."""
    plan = ReleasePlan.objects.select_related(
        "alias__tenant", "stable__adapter", "candidate__adapter"
    ).get(pk=plan_id)
    with telemetry.span(
        "lora_portal.release_plan.decision",
        plan_attributes(plan),
        links_to=plan.candidate.upload_traceparent,
    ):
        done = _plan_tick(plan, client=client, now=now)
        telemetry.annotate(
            {
                "lora_portal.release_plan.decision": done.decision,
                "lora_portal.release_plan.reason": done.reason,
            }
        )
    return done


def plan_attributes(plan: ReleasePlan) -> dict[str, Any]:
    """What a decision's span says of its plan and step: names, ids and figures only."""
    steps = list(plan.steps or [])
    index = plan.current_step
    return {
        "lora_portal.tenant": plan.alias.tenant.slug,
        "lora_portal.alias": plan.alias.name,
        "lora_portal.adapter": plan.candidate.adapter.name,
        "lora_portal.release_plan": plan.pk,
        "lora_portal.release_plan.status": str(plan.status),
        "lora_portal.release_plan.stable": version_label(plan.stable),
        "lora_portal.release_plan.candidate": version_label(plan.candidate),
        "lora_portal.release_plan.step": index,
        "lora_portal.release_plan.steps": len(steps),
        "lora_portal.release_plan.step_weight": int(steps[index]) if index < len(steps) else -1,
        "lora_portal.release_plan.min_step_seconds": plan.min_step_seconds,
        "lora_portal.release_plan.min_step_samples": plan.min_step_samples,
        "lora_portal.release_plan.alpha": plan.alpha,
        "lora_portal.release_plan.margin": plan.margin,
    }


def guard_attributes(verdicts: dict[str, GuardVerdict]) -> dict[str, Any]:
    """Each guard's figures as span attributes, `lora_portal.guard.<name>.<figure>` (an
    absent figure is left out: attributes hold no None)."""
    out: dict[str, Any] = {}
    for name, v in verdicts.items():
        prefix = f"lora_portal.guard.{name}."
        figures = {
            "decision": str(v.decision),
            "estimate": v.estimate,
            "interval_low": v.low,
            "interval_high": v.high,
            "candidate_n": v.candidate.n,
            "candidate_passed": v.candidate.passed,
            "stable_n": v.stable.n,
            "stable_passed": v.stable.passed,
        }
        out.update({prefix + k: x for k, x in figures.items() if x is not None})
    return out


def _plan_tick(plan: ReleasePlan, *, client: redis.Redis | None, now: float) -> PlanPass:
    index = plan.current_step
    if plan.status == PlanStatus.RUNNING and plan.candidate.status != VersionStatus.ACTIVE:
        # Disabled or retired under the plan: the gateway serves it no more; the stable alone.
        reason = f"the candidate is {plan.candidate.status}"
        with transaction.atomic():
            done = roll_back(plan, actor=CONTROLLER, automatic=True, reason=reason)
        return PlanPass(plan.pk, index, "rollback" if done else "", reason)
    step = plan.step_rows.get(index=index)
    verdicts = step_guards(plan, step, client=client, now=now)
    telemetry.annotate(guard_attributes(verdicts))
    decision = combine(list(verdicts.values())) if verdicts else Decision.ADVANCE
    figures = {name: v.as_dict() for name, v in verdicts.items()}
    ReleaseStep.objects.filter(pk=step.pk).update(guards=figures, evaluated_at=timezone.now())
    step.guards = figures
    plan_changed(plan)
    if plan.status != PlanStatus.RUNNING:
        return PlanPass(plan.pk, index, "hold", f"plan is {plan.status}")
    if decision == Decision.ROLLBACK:
        failed = [f"{name}: {v.reason}" for name, v in verdicts.items() if v.decision == decision]
        reason = "; ".join(failed)
        with transaction.atomic():
            done = roll_back(plan, actor=CONTROLLER, automatic=True, reason=reason)
        return PlanPass(plan.pk, index, "rollback" if done else "", reason)
    started = step.started_at or plan.step_started_at
    waited = timezone.now() - started
    if decision == Decision.HOLD:
        held = [f"{name}: {v.reason}" for name, v in verdicts.items() if v.decision == decision]
        return PlanPass(plan.pk, index, "hold", "; ".join(held))
    if waited < timedelta(seconds=plan.min_step_seconds):
        return PlanPass(
            plan.pk,
            index,
            "hold",
            f"the step has run {waited.total_seconds():.0f} s of {plan.min_step_seconds} s",
        )
    reason = "every guard holds" if verdicts else "no guard applies; the step's time is up"
    with transaction.atomic():
        action = move_to_next(plan, actor=CONTROLLER, automatic=True, reason=reason)
    return PlanPass(plan.pk, index, action, reason)
