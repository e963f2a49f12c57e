"""The alias's release page: its newest plan as a timeline of steps, each with its guards
(estimate, interval, samples so far), live over the tenant's events socket (pages.js reads the
page again on a `release.plan` event), and a person's pause, resume, advance and roll back for
those the rule of a manual weight change allows (`manage_aliases`, as the API asks)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from adapters import selectors as registry
from adapters.models import Alias
from core.errors import ApplicationError, NotFound
from core.request import PortalRequest
from evals.models import PLAN_OPEN, PlanStatus, ReleasePlan
from evals.scoring.pairwise import Outcome
from evals.selectors import release_plan_get, release_plans_of, release_samples_of
from evals.services import release_plans
from tenants.pagekit import page_view, post_text, render_page, tenant_scope

ACTIONS = {
    "pause": release_plans.plan_pause,
    "resume": release_plans.plan_resume,
    "advance": release_plans.plan_advance,
    "rollback": release_plans.plan_rollback,
}
PAIR_OUTCOMES = [o.value for o in Outcome]
KEPT_PAIRS_SHOWN = 20
DONE = {"advance": "Advanced", "complete": "Advanced", "rolled_back": "Rolled back"}


def _alias(tenant: Any, name: str) -> Alias:
    found = registry.aliases_for(tenant=tenant).filter(name=name).first()
    if found is None:
        raise NotFound("alias.not_found", f"Tenant '{tenant.slug}' has no alias '{name}'.")
    return found


def _guard_rows(guards: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, g in sorted(guards.items()):
        low, high = (g.get("interval") or [None, None])[:2]
        rows.append(
            {
                "name": name,
                "decision": g.get("decision", ""),
                "reason": g.get("reason", ""),
                "estimate": g.get("estimate"),
                "low": low,
                "high": high,
                "candidate": g.get("candidate") or {},
                "stable": g.get("stable") or {},
            }
        )
    return rows


def plan_timeline(plan: ReleasePlan) -> list[dict[str, Any]]:
    """Each step in order: where it stands (done, current, rolled back, to come), its weight,
    its sampled answers per side and its guards as last judged."""
    steps = []
    for step in plan.step_rows.all():
        if step.outcome == "rolled_back":
            state = "rolled-back"
        elif step.index < plan.current_step or step.outcome == "completed":
            state = "done"
        elif step.index == plan.current_step and plan.status in PLAN_OPEN:
            state = "current"
        else:
            state = "to-come"
        steps.append(
            {
                "index": step.index,
                "label": f"{step.weight} %" if step.weight else "shadow",
                "state": state,
                "outcome": DONE.get(step.outcome, step.outcome),
                "started_at": step.started_at,
                "ended_at": step.ended_at,
                "evaluated_at": step.evaluated_at,
                "stable": (step.stable_passed, step.stable_n),
                "candidate": (step.candidate_passed, step.candidate_n),
                "guards": _guard_rows(step.guards or {}),
                "shadow": None
                if step.weight
                else {
                    "pairs": [(o, (step.pairs or {}).get(o, 0)) for o in PAIR_OUTCOMES],
                    "pairs_n": sum((step.pairs or {}).values()),
                    "skipped": sorted((step.shadow_skipped or {}).items()),
                    "skipped_n": sum((step.shadow_skipped or {}).values()),
                },
            }
        )
    return steps


def _buttons(plan: ReleasePlan | None) -> list[tuple[str, str, str]]:
    """(action, label, style) for an open plan: pause or resume, advance, roll back."""
    if plan is None or plan.status not in PLAN_OPEN:
        return []
    first = ("pause", "Pause", "secondary")
    if plan.status == PlanStatus.PAUSED:
        first = ("resume", "Resume", "secondary")
    return [first, ("advance", "Advance now", ""), ("rollback", "Roll back", "danger")]


@page_view
def alias_release(request: PortalRequest, tenant: str, alias: str) -> HttpResponse:
    access, found = tenant_scope(request, tenant)
    the_alias = _alias(found, alias)
    plans = list(release_plans_of(alias=the_alias)[:6])
    plan = plans[0] if plans else None
    return render_page(
        request,
        "evals/alias_release.html",
        {
            "tenant": found,
            "alias": the_alias,
            "plan": plan,
            "steps": plan_timeline(plan) if plan else [],
            "decisions": list(plan.decisions.select_related("actor")) if plan else [],
            "earlier": plans[1:],
            "open": plan is not None and plan.status in PLAN_OPEN,
            "can_act": access.tenant_can(found, "manage_aliases"),
            # Kept shadow pairs are the tenant's data: its eval reviewers only, as the API's
            # samples endpoint.
            "pairs": list(release_samples_of(plan=plan).filter(side="pair")[:KEPT_PAIRS_SHOWN])
            if plan is not None and access.tenant_can(found, "manage_evals")
            else [],
            "action_buttons": _buttons(plan),
        },
    )


@page_view
@require_POST
def alias_release_action(
    request: PortalRequest, tenant: str, alias: str, plan: int, action: str
) -> HttpResponse:
    """A person's pause, resume, advance or roll back (the services check who may)."""
    access, found = tenant_scope(request, tenant, "manage_aliases")
    act = ACTIONS.get(action)
    if act is None:
        raise NotFound("release.unknown_action", f"No action '{action}' on a release plan.")
    the_plan = release_plan_get(alias=_alias(found, alias), plan_id=plan)
    try:
        act(
            access=access,
            plan=the_plan,
            reason=post_text(request, "reason", max_length=500),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        if exc.status in (403, 404):
            raise
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Release plan {the_plan.pk}: {action} recorded.")
    return redirect("alias-release", tenant=found.slug, alias=alias)
