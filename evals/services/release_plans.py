"""Release plans: start one on an alias, and a person's pause, resume, advance and roll back.

Every change moves the plan by a conditional update on its status and step (so a person and the
controller, or two workers, never both act on one step), moves the alias's weights through the
registry's alias service (adapters.services.releases.alias_release_weights: a new revision, and
the gateway's tables re-read), records a ReleaseDecision with the numbers it was taken on, and
writes an audit event, all in one transaction. Who may: the rule of a manual weight change
(`manage_aliases` on the alias's tenant), checked here for every person's action.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from adapters.models import AdapterVersion, Alias, VersionStatus
from adapters.services.aliases import current_targets, parse_version_ref
from adapters.services.releases import alias_release_weights
from core.audit import record_event
from core.errors import ApplicationError, Conflict, NotFound
from evals.models import (
    PLAN_OPEN,
    EvalPolicy,
    PlanStatus,
    ReleaseDecision,
    ReleasePlan,
    ReleaseStep,
)
from evals.services.release_events import plan_changed
from tenants.access_port import Access

MAX_STEPS = 10
CONTROLLER = "release-controller"


def plan_label(plan: ReleasePlan) -> str:
    return f"{plan.alias.tenant.slug}/{plan.alias.name}#{plan.pk}"


def version_label(version: AdapterVersion) -> str:
    return f"{version.adapter.name}@{version.number}"


def check_steps(steps: Any) -> list[int]:
    """The candidate's weights step by step: whole numbers rising strictly to 100, the first
    of which may be 0 (a shadow step: callers see the stable alone while the candidate is asked
    the stable's sampled requests again in the background, evals.services.shadow_pairs)."""
    if not isinstance(steps, list) or not 2 <= len(steps) <= MAX_STEPS:
        raise ApplicationError(
            "release.bad_steps",
            f"Give 2-{MAX_STEPS} steps, the candidate's weight at each, ending at 100 "
            "(e.g. [0, 5, 25, 50, 100]).",
        )
    if any(not isinstance(w, int) or isinstance(w, bool) for w in steps):
        raise ApplicationError("release.bad_steps", "Each step is a whole percentage.")
    if 0 in steps[1:]:
        raise ApplicationError(
            "release.shadow_not_first",
            "A shadow step (0 %) can only be the first step: once callers have seen the "
            f"candidate there is no going back to shadow; got {steps}.",
        )
    rest = steps[1:] if steps[0] == 0 else steps
    if any(not 1 <= w <= 100 for w in rest) or rest != sorted(set(rest)) or steps[-1] != 100:
        raise ApplicationError(
            "release.bad_steps",
            f"Steps must rise strictly from 1 to 100 and end at 100 (after a first shadow "
            f"step, 0); got {steps}.",
        )
    return steps


def check_shadow_policy(candidate: AdapterVersion) -> None:
    """A shadow step is judged by pairs: the candidate's adapter's eval policy must name the
    judge that compares them."""
    policy = EvalPolicy.objects.filter(adapter_id=candidate.adapter_id).first()
    if policy is None or not policy.judge:
        raise ApplicationError(
            "release.shadow_needs_judge",
            f"A shadow step's pairs are judged by the eval policy's judge, and adapter "
            f"'{candidate.adapter.name}' has none; set `judge` in its eval policy "
            "(PUT .../eval-policy/) or start the plan at a small weight (e.g. 5).",
        )


def _version(alias: Alias, ref: str) -> AdapterVersion:
    name, number = parse_version_ref(ref)
    version = (
        AdapterVersion.objects.select_related("adapter")
        .filter(tenant_id=alias.tenant_id, adapter__name=name, number=number)
        .first()
    )
    if version is None:
        raise NotFound("alias.unknown_version", f"Tenant '{alias.tenant.slug}' has no '{ref}'.")
    if version.status != VersionStatus.ACTIVE:
        raise Conflict(
            "alias.version_not_active",
            f"'{ref}' is '{version.status}'; release it (make it active) before a plan.",
        )
    return version


def plan_start(
    *,
    access: Access,
    alias: Alias,
    candidate: str,
    steps: list[int],
    min_step_seconds: int = 300,
    min_step_samples: int = 50,
    sample_share: float = 0.10,
    alpha: float = 0.05,
    margin: float = 0.05,
    keep_text_days: int = 0,
    request_id: str = "",
) -> ReleasePlan:
    """Start releasing `candidate` (`adapter@N`) on an alias now served by one stable version:
    the first step's weight is applied at once."""
    access.require_tenant(alias.tenant, "manage_aliases")
    steps = check_steps(steps)
    if not 0 < sample_share <= 1:
        raise ApplicationError("release.bad_sample_share", "sample_share must lie in (0, 1].")
    if not 0 < alpha < 0.5 or not 0 <= margin < 1:
        raise ApplicationError(
            "release.bad_test", "alpha must lie in (0, 0.5) and margin in [0, 1)."
        )
    if not 0 <= keep_text_days <= 90:
        raise ApplicationError(
            "release.bad_keep_text_days",
            "keep_text_days is 0 (counts only) or a number of days up to 90.",
        )
    if min_step_samples < 10:
        raise ApplicationError(
            "release.bad_min_samples",
            "min_step_samples must be at least 10 (fewer cannot be judged).",
        )
    version = _version(alias, candidate)
    if steps[0] == 0:
        check_shadow_policy(version)
    with transaction.atomic():
        locked = Alias.objects.select_for_update().select_related("tenant").get(pk=alias.pk)
        targets = current_targets(locked)
        if len(targets) != 1:
            raise Conflict(
                "release.alias_not_settled",
                f"Alias '{locked.name}' has {len(targets)} targets; a plan starts from one "
                "stable version at 100 % (promote or roll back first).",
            )
        stable = targets[0][0]
        if stable.pk == version.pk:
            raise Conflict("release.same_version", f"'{candidate}' already serves the alias.")
        if stable.adapter.base_model_id != version.adapter.base_model_id:
            raise ApplicationError(
                "alias.mixed_base_models", "The candidate must share the stable's base model."
            )
        now = timezone.now()
        plan = ReleasePlan(
            tenant_id=locked.tenant_id,
            alias=locked,
            stable=stable,
            candidate=version,
            steps=steps,
            min_step_seconds=min_step_seconds,
            min_step_samples=min_step_samples,
            sample_share=sample_share,
            alpha=alpha,
            margin=margin,
            keep_text_days=keep_text_days,
            step_started_at=now,
            created_by=access.user if getattr(access.user, "is_authenticated", False) else None,
        )
        try:
            with transaction.atomic():
                plan.save()
        except IntegrityError:
            raise Conflict(
                "release.plan_open",
                f"Alias '{locked.name}' already has a release plan running or paused.",
            ) from None
        ReleaseStep.objects.bulk_create(
            [
                ReleaseStep(plan=plan, index=i, weight=w, started_at=now if i == 0 else None)
                for i, w in enumerate(steps)
            ]
        )
        alias_release_weights(
            alias=locked,
            stable=stable,
            candidate=version,
            weight=steps[0],
            sample_share=sample_share,
            actor=access.user,
            reason=f"release plan {plan.pk}: step 0 ({steps[0]} %)",
        )
        record_event(
            action="release_plan.start",
            actor=access.user,
            tenant=locked.tenant,
            obj=plan,
            object_id=plan_label(plan),
            after=plan_settings(plan),
            request_id=request_id,
        )
        plan_changed(plan)
    return plan


def plan_settings(plan: ReleasePlan) -> dict[str, Any]:
    return {
        "stable": version_label(plan.stable),
        "candidate": version_label(plan.candidate),
        "steps": plan.steps,
        "min_step_seconds": plan.min_step_seconds,
        "min_step_samples": plan.min_step_samples,
        "sample_share": plan.sample_share,
        "alpha": plan.alpha,
        "margin": plan.margin,
        "keep_text_days": plan.keep_text_days,
    }


def step_numbers(step: ReleaseStep) -> dict[str, Any]:
    """A step's figures as a decision keeps them (a shadow step's pairs and skips too)."""
    numbers: dict[str, Any] = {
        "step": step.index,
        "weight": step.weight,
        "stable": {"n": step.stable_n, "passed": step.stable_passed},
        "candidate": {"n": step.candidate_n, "passed": step.candidate_passed},
        "guards": step.guards,
    }
    if step.weight == 0:
        numbers["pairs"] = step.pairs
        numbers["shadow_skipped"] = step.shadow_skipped
    return numbers


# --- moving a plan (the controller's and a person's) -------------------------------------------


def claim(plan: ReleasePlan, *, step: int, from_status: str, **changes: Any) -> bool:
    """The conditional update that makes a decision this caller's: True for exactly one of
    several callers that saw the plan at `step` in `from_status`."""
    return (
        ReleasePlan.objects.filter(pk=plan.pk, status=from_status, current_step=step).update(
            **changes
        )
        == 1
    )


def move_to_next(
    plan: ReleasePlan, *, actor: Any, automatic: bool, reason: str, request_id: str = ""
) -> str:
    """Leave the current step for the next one (the last, 100 %: the plan completes). Called
    inside a transaction, after the caller's checks; returns the action taken, or "" when
    another caller moved the plan first."""
    index = plan.current_step
    step = plan.step_rows.get(index=index)
    now = timezone.now()
    following = index + 1
    last = following == len(plan.steps) - 1
    action = "complete" if last else "advance"
    changes: dict[str, Any] = {"current_step": following, "step_started_at": now}
    if last:
        changes.update(status=PlanStatus.COMPLETED, finished_at=now, reason=reason)
    if not claim(plan, step=index, from_status=plan.status, **changes):
        return ""
    ReleaseStep.objects.filter(pk=step.pk).update(ended_at=now, outcome=action)
    ReleaseStep.objects.filter(plan=plan, index=following).update(
        started_at=now, ended_at=now if last else None, outcome="completed" if last else ""
    )
    weight = plan.steps[following]
    alias_release_weights(
        alias=plan.alias,
        stable=plan.stable,
        candidate=plan.candidate,
        weight=weight,
        sample_share=0.0 if last else plan.sample_share,
        actor=actor,
        reason=f"release plan {plan.pk}: {action} to step {following} ({weight} %): {reason}",
        evidence=step_numbers(step),
    )
    _decided(plan, step, action, actor=actor, automatic=automatic, reason=reason, rid=request_id)
    return action


def roll_back(
    plan: ReleasePlan, *, actor: Any, automatic: bool, reason: str, request_id: str = ""
) -> bool:
    """End the plan with the stable alone at 100 %; False when another caller moved it first."""
    index = plan.current_step
    step = plan.step_rows.get(index=index)
    now = timezone.now()
    if not claim(
        plan,
        step=index,
        from_status=plan.status,
        status=PlanStatus.ROLLED_BACK,
        finished_at=now,
        reason=reason,
    ):
        return False
    ReleaseStep.objects.filter(pk=step.pk).update(ended_at=now, outcome="rolled_back")
    alias_release_weights(
        alias=plan.alias,
        stable=plan.stable,
        candidate=plan.candidate,
        weight=0,
        sample_share=0.0,
        actor=actor,
        reason=f"release plan {plan.pk}: rolled back at step {index}: {reason}",
        evidence=step_numbers(step),
    )
    _decided(
        plan, step, "rollback", actor=actor, automatic=automatic, reason=reason, rid=request_id
    )
    return True


def _decided(
    plan: ReleasePlan,
    step: ReleaseStep,
    action: str,
    *,
    actor: Any,
    automatic: bool,
    reason: str,
    rid: str,
) -> None:
    numbers = step_numbers(step)
    user = actor if getattr(actor, "is_authenticated", False) else None
    ReleaseDecision.objects.create(
        plan=plan,
        step=step.index,
        action=action,
        automatic=automatic,
        actor=user,
        reason=reason,
        numbers=numbers,
    )
    record_event(
        action=f"release_plan.{action}",
        actor=actor,
        tenant=plan.alias.tenant,
        obj=plan,
        object_id=plan_label(plan),
        before={"step": step.index, "weight": step.weight, "status": plan.status},
        after={"reason": reason, "automatic": automatic, **numbers},
        request_id=rid,
    )
    plan_changed(plan)


# --- a person's actions -----------------------------------------------------------------------


def _locked_open(plan: ReleasePlan) -> ReleasePlan:
    locked = (
        ReleasePlan.objects.select_for_update(of=("self",))
        .select_related("alias__tenant", "stable__adapter", "candidate__adapter")
        .get(pk=plan.pk)
    )
    if locked.status not in PLAN_OPEN:
        raise Conflict(
            "release.plan_finished", f"Release plan {plan.pk} is {locked.status}; nothing to do."
        )
    return locked


def plan_pause(
    *, access: Access, plan: ReleasePlan, reason: str = "", request_id: str = ""
) -> ReleasePlan:
    return _set_paused(access, plan, True, reason, request_id)


def plan_resume(
    *, access: Access, plan: ReleasePlan, reason: str = "", request_id: str = ""
) -> ReleasePlan:
    return _set_paused(access, plan, False, reason, request_id)


def _set_paused(
    access: Access, plan: ReleasePlan, pause: bool, reason: str, request_id: str
) -> ReleasePlan:
    access.require_tenant(plan.alias.tenant, "manage_aliases")
    with transaction.atomic():
        locked = _locked_open(plan)
        want, have = (
            (PlanStatus.PAUSED, PlanStatus.RUNNING)
            if pause
            else (PlanStatus.RUNNING, PlanStatus.PAUSED)
        )
        if locked.status == want:
            return locked  # a retried pause (or resume) is harmless and records nothing
        claim(locked, step=locked.current_step, from_status=have, status=want)
        step = locked.step_rows.get(index=locked.current_step)
        _decided(
            locked,
            step,
            "pause" if pause else "resume",
            actor=access.user,
            automatic=False,
            reason=reason,
            rid=request_id,
        )
    plan.refresh_from_db()
    return plan


def plan_advance(
    *, access: Access, plan: ReleasePlan, reason: str = "", request_id: str = ""
) -> ReleasePlan:
    """A person moves the plan to its next step now, whatever its guards say (recorded with
    their figures)."""
    return _moved_by_hand(access, plan, move_to_next, reason or "advanced by hand", request_id)


def plan_rollback(
    *, access: Access, plan: ReleasePlan, reason: str = "", request_id: str = ""
) -> ReleasePlan:
    return _moved_by_hand(access, plan, roll_back, reason or "rolled back by hand", request_id)


def _moved_by_hand(
    access: Access, plan: ReleasePlan, move: Any, reason: str, request_id: str
) -> ReleasePlan:
    access.require_tenant(plan.alias.tenant, "manage_aliases")
    with transaction.atomic():
        move(
            _locked_open(plan),
            actor=access.user,
            automatic=False,
            reason=reason,
            request_id=request_id,
        )
    plan.refresh_from_db()
    return plan


def open_plan_of(alias: Alias) -> ReleasePlan | None:
    return ReleasePlan.objects.filter(Q(alias=alias) & Q(status__in=PLAN_OPEN)).first()
