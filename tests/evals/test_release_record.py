"""The compliance record of a version released through a plan carries every step with its
samples and guard figures and every decision with its numbers (the candidate's record and the
stable's); a decision changed in the database afterwards stops the record's check."""

from __future__ import annotations

import pytest
from lora_portal_client.evidence import PinnedKeys, verify_record

from evals.models import ReleaseDecision
from evals.services import release_plans
from portal.evidence_check import check_record
from portal.evidence_signing import portal_keys
from tests.evals.test_release_plans import access, counts, start, tick, with_checks

pytestmark = pytest.mark.django_db
RECORD = "/api/v1/tenants/acme/adapters/support/versions/{n}/evidence/"


def test_the_record_carries_each_step_with_its_guards_and_each_decision(acme):
    with_checks(acme)
    plan = start(acme, steps=(5, 50, 100))
    counts(plan, stable=(300, 300), candidate=(300, 300))
    assert tick(plan).decision == "advance"
    plan.refresh_from_db()
    release_plans.plan_pause(access=access(acme), plan=plan, reason="look first")
    release_plans.plan_resume(access=access(acme), plan=plan, reason="looked")
    plan.refresh_from_db()
    counts(plan, stable=(300, 300), candidate=(300, 150))
    assert tick(plan).decision == "rollback"

    record = acme.client("alice").get(RECORD.format(n=2)).json()
    (entry,) = record["evals"]["release_plans"]
    assert (entry["id"], entry["role"], entry["status"]) == (plan.pk, "candidate", "rolled_back")
    assert (entry["stable"], entry["candidate"], entry["steps"]) == (
        "support@1",
        "support@2",
        [5, 50, 100],
    )
    first, second, third = entry["step_rows"]
    assert first["samples"]["candidate"] == {"n": 300, "passed": 300}
    assert first["outcome"] == "advance" and second["outcome"] == "rolled_back"
    guard = second["guards"]["live_checks"]
    assert guard["decision"] == "rollback" and guard["interval"][1] < 0
    assert third["outcome"] == ""
    assert [(d["step"], d["action"], d["actor"]) for d in entry["decisions"]] == [
        (0, "advance", "release-controller"),
        (1, "pause", "alice"),
        (1, "resume", "alice"),
        (1, "rollback", "release-controller"),
    ]
    assert entry["decisions"][-1]["numbers"]["guards"]["live_checks"]["estimate"] == -0.5
    audited = {e["action"] for e in record["audit_events"]}
    assert {"release_plan.start", "release_plan.advance", "release_plan.rollback"} <= audited
    pinned = PinnedKeys.parse(portal_keys())
    assert verify_record(record, pinned=pinned) == [] and check_record(record) == []
    # The stable's record names the plan too.
    (stable,) = acme.client("alice").get(RECORD.format(n=1)).json()["evals"]["release_plans"]
    assert (stable["id"], stable["role"]) == (plan.pk, "stable")

    # A rollback's figures rewritten in the database to look like an advance.
    decision = ReleaseDecision.objects.get(plan=plan, action="rollback")
    decision.numbers["guards"]["live_checks"]["decision"] = "advance"
    decision.save()
    assert check_record(record) == [
        f"release plan {plan.pk}: its decisions differ from the record's",
        f"release plan {plan.pk}: its decisions changed after they were audited",
    ]


def test_the_records_page_shows_the_plans_steps_and_decisions(acme):
    with_checks(acme)
    plan = start(acme, steps=(5, 100))
    counts(plan, stable=(300, 300), candidate=(300, 300))
    assert tick(plan).decision == "complete"
    html = acme.client("alice").get("/t/acme/a/support/v/2/evidence/").content.decode()
    assert 'data-testid="evidence-release-plans"' in html
    assert f"Plan {plan.pk} on acme/support-bot: support@1 → support@2 (candidate), completed" in (
        html
    )
    assert "live_checks: advance" in html and "release-controller" in html
