"""Scoring the live answers the gateway sampled for release plans (gateway.release_samples): a
worker pops them from Redis, reads each answer's text, scores it with the adapter's live checks
(evals.scoring.live_checks) and adds it to the counts of its plan's current step, on the side
(stable or candidate) of the version that answered. Only counts are kept, unless the plan keeps
text (`keep_text_days`): then each sample's prompt, answer and verdicts are a ReleaseSample until
the retention job (samples_delete_expired) deletes them.

In a shadow step (weight 0) the stable's samples are also handed to the shadow pairs
(evals.services.shadow_pairs), which ask the candidate the same request in the background.

A sample taken before its plan's current step began (under the previous weights), for an alias
with no open plan, or of a version that is neither side, is dropped. A worker that dies between
the pop and the commit loses that batch: they are a sample, and the guard's test needs no
particular one.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.audit import record_event
from evals.models import (
    PLAN_OPEN,
    EvalPolicy,
    PlanStatus,
    ReleasePlan,
    ReleaseSample,
    ReleaseStep,
)
from evals.scoring.live_checks import score_live
from evals.services import shadow_pairs
from evals.services.shadow_pairs import shadow_request
from tenants.models import Tenant
from workers.redis_contract.keys import RELEASE_SAMPLES

log = logging.getLogger(__name__)
BATCH = 500


def answer_text(body: str) -> str | None:
    """The answer in an engine's reply as the gateway relayed it: a JSON body (chat or
    completion), or a stream's `data:` events joined; None when it holds no answer."""
    body = body.strip()
    if body.startswith("{"):
        try:
            choice = json.loads(body)["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            return None
        message = choice.get("message")
        return message.get("content") or "" if message else choice.get("text")
    parts: list[str] = []
    seen = False
    for line in body.splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            continue
        try:
            choices = json.loads(data).get("choices") or []
        except (ValueError, AttributeError):
            continue
        for choice in choices[:1]:
            seen = True
            delta = choice.get("delta") or {}
            parts.append(delta.get("content") or choice.get("text") or "")
    return "".join(parts) if seen else None


def samples_score(*, client: redis.Redis, batch: int = BATCH) -> int:
    """Pop up to `batch` samples and count them; returns how many were counted."""
    raw = client.lpop(RELEASE_SAMPLES, batch)
    if not raw:
        return 0
    samples = []
    for item in raw if isinstance(raw, list) else [raw]:  # lpop with a count: a list
        try:
            samples.append(json.loads(item))
        except ValueError:
            log.warning("release sample dropped: not JSON")
    return count_samples(samples, client=client)


def count_samples(samples: list[dict[str, Any]], *, client: redis.Redis | None = None) -> int:
    alias_ids = {s["alias_id"] for s in samples if isinstance(s.get("alias_id"), int)}
    plans = {
        p.alias_id: p
        for p in ReleasePlan.objects.select_related("candidate").filter(
            alias_id__in=alias_ids, status__in=PLAN_OPEN
        )
    }
    checks = (
        dict(
            EvalPolicy.objects.filter(
                adapter_id__in=[p.candidate.adapter_id for p in plans.values()]
            ).values_list("adapter_id", "live_checks")
        )
        if plans
        else {}
    )
    steps = {
        (s.plan_id, s.index): s
        for s in ReleaseStep.objects.filter(
            plan__in=plans.values(), index__in={p.current_step for p in plans.values()}
        )
    }
    # (step id, side) -> [n, passed]
    adds: defaultdict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    kept: list[ReleaseSample] = []
    now = timezone.now()
    shadow: list[tuple[ReleaseStep, dict[str, Any]]] = []
    for sample in samples:
        plan = plans.get(sample.get("alias_id", 0))
        if plan is None:
            continue
        spec = checks.get(plan.candidate.adapter_id) or {}
        step = steps.get((plan.pk, plan.current_step))
        if step is None or step.started_at is None:
            continue
        at = datetime.fromtimestamp(float(sample.get("at", 0)), UTC)
        if at < step.started_at:
            continue
        sides = {plan.stable_id: "stable", plan.candidate_id: "candidate"}
        side = sides.get(sample.get("version_id", 0))
        text = answer_text(str(sample.get("body", "")))
        if side is None or text is None:
            continue
        if step.weight == 0 and side == "stable" and plan.status == PlanStatus.RUNNING:
            shadow.append((step, shadow_request(plan, step, sample, text)))
        if not spec:
            continue
        verdicts = score_live(text, spec)
        passed = all(v.passed for v in verdicts.values())
        counts = adds[(step.pk, side)]
        counts[0] += 1
        counts[1] += int(passed)
        if plan.keep_text_days:
            kept.append(
                ReleaseSample(
                    tenant_id=plan.tenant_id,
                    plan=plan,
                    step=step.index,
                    side=side,
                    passed=passed,
                    verdicts={name: v.as_dict() for name, v in verdicts.items()},
                    prompt=_prompt_text(sample.get("prompt")),
                    answer=text,
                    created_at=now,
                    expires_at=now + timedelta(days=plan.keep_text_days),
                )
            )
    handed = shadow_pairs.hand_over(shadow, client=client) if shadow and client else {}
    with transaction.atomic():
        for step_id, skipped in handed.items():
            shadow_pairs.count_skipped(step_id, skipped)
        ReleaseSample.objects.bulk_create(kept)
        for (step_id, side), (n, n_passed) in adds.items():
            ReleaseStep.objects.filter(pk=step_id).update(
                **{
                    f"{side}_n": F(f"{side}_n") + n,
                    f"{side}_passed": F(f"{side}_passed") + n_passed,
                }
            )
    return sum(n for n, _ in adds.values())


def _prompt_text(prompt: Any) -> str:
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt, ensure_ascii=False)


def samples_delete_expired(*, now: datetime | None = None) -> int:
    """The retention job: delete kept sample text past its plan's keep_text_days; one audit
    event per tenant that lost rows, with how many."""
    now = now or timezone.now()
    with transaction.atomic():
        expired = ReleaseSample.objects.filter(expires_at__lte=now)
        by_tenant: dict[int, int] = defaultdict(int)
        for tenant_id in expired.values_list("tenant_id", flat=True):
            by_tenant[tenant_id] += 1
        deleted, _ = expired.delete()
        tenants = Tenant.objects.in_bulk(list(by_tenant))
        for tenant_id, count in sorted(by_tenant.items()):
            record_event(
                action="release_samples.expire",
                actor="retention",
                tenant=tenants[tenant_id],
                object_type="evals.releasesample",
                after={"deleted": count, "expired_by": now.isoformat()},
            )
    return deleted
