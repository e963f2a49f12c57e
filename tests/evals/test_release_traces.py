"""A release plan's decision is a span, read back from a real OTLP receiver: the controller's
task runs in the session's real Celery worker, which exports its traces there
(tests/fixtures/celery_worker.py), and the span carries the plan's, the step's and each guard's
figures and the decision: names, ids and figures only."""

from __future__ import annotations

from typing import Any

import pytest

from evals.tasks import release_plans_tick
from tests.evals.test_release_plans import counts, start, with_checks

pytestmark = [pytest.mark.django_db(transaction=True)]


def decision_of(spans: list[dict[str, Any]], plan_id: int) -> dict[str, Any] | None:
    return next(
        (
            s
            for s in spans
            if s["name"] == "lora_portal.release_plan.decision"
            and s["attributes"].get("lora_portal.release_plan") == plan_id
        ),
        None,
    )


def test_a_release_plans_decision_is_a_span_with_its_figures(
    acme, celery_worker_process, otlp_receiver
):
    with_checks(acme)
    plan = start(acme, steps=(5, 50, 100), min_step_samples=20)
    counts(plan, stable=(30, 30), candidate=(30, 2))
    release_plans_tick.apply_async(queue=celery_worker_process["queue"])

    spans = otlp_receiver.wait_for(lambda spans: decision_of(spans, plan.pk))
    span = decision_of(spans, plan.pk)
    assert span is not None
    assert span["service"] == "lora-portal-worker"
    attributes = span["attributes"]
    assert {k: v for k, v in attributes.items() if not k.startswith("lora_portal.guard.")} == {
        "lora_portal.tenant": "acme",
        "lora_portal.alias": plan.alias.name,
        "lora_portal.adapter": "support",
        "lora_portal.release_plan": plan.pk,
        "lora_portal.release_plan.status": "running",
        "lora_portal.release_plan.stable": "support@1",
        "lora_portal.release_plan.candidate": "support@2",
        "lora_portal.release_plan.step": 0,
        "lora_portal.release_plan.steps": 3,
        "lora_portal.release_plan.step_weight": 5,
        "lora_portal.release_plan.min_step_seconds": 0,
        "lora_portal.release_plan.min_step_samples": 20,
        "lora_portal.release_plan.alpha": plan.alpha,
        "lora_portal.release_plan.margin": plan.margin,
        "lora_portal.release_plan.decision": "rollback",
        "lora_portal.release_plan.reason": attributes["lora_portal.release_plan.reason"],
    }
    assert "live_checks" in attributes["lora_portal.release_plan.reason"]
    # The live checks' guard, with the counts it judged and its interval.
    assert attributes["lora_portal.guard.live_checks.decision"] == "rollback"
    assert attributes["lora_portal.guard.live_checks.candidate_n"] == 30
    assert attributes["lora_portal.guard.live_checks.candidate_passed"] == 2
    assert attributes["lora_portal.guard.live_checks.stable_n"] == 30
    assert attributes["lora_portal.guard.live_checks.stable_passed"] == 30
    assert attributes["lora_portal.guard.live_checks.interval_high"] < 0
    assert attributes["lora_portal.guard.live_checks.estimate"] == pytest.approx(
        2 / 30 - 1, abs=1e-3
    )
    # The errors guard read the gateway's counts (none yet: it holds).
    assert attributes["lora_portal.guard.errors.decision"] == "hold"
    # In the controller task's trace (Celery's instrumentation is its parent).
    parent = next(s for s in spans if s["span_id"] == span["parent_span_id"])
    assert parent["scope"] == "opentelemetry.instrumentation.celery"
