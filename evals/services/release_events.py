"""Tell a plan's live pages that it moved: its guards were judged again, or a decision was taken.

A small event to the tenant's events group after commit (core.events); the alias page's script
(static/portal/pages.js) then reads the page again under the reader's own access, so the event
itself carries no figures.
"""

from __future__ import annotations

from core.events import broadcast_after_commit
from evals.models import ReleasePlan


def plan_changed(plan: ReleasePlan) -> None:
    candidate = plan.candidate
    broadcast_after_commit(
        tenant_id=plan.tenant_id,
        event={
            "kind": "release.plan",
            "alias": plan.alias.name,
            "plan": plan.pk,
            # Who may see the candidate's adapter may see its plan move (portal.live_access).
            "version": f"{candidate.adapter.name}@{candidate.number}",
        },
    )
