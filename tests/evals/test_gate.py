"""The eval gate at approval: refused (409 version.eval_gate_failed, each unmet criterion named)
while no run has finished or the latest fails the policy; overridden only by a second reviewer
with a reason, audited and kept in the approval's evidence."""

from __future__ import annotations

import pytest

from adapters.models import AdapterVersion, Decision
from core.audit_models import AuditEvent
from evals.models import EvalCaseResult, GateRefusal
from portal.audit_verify import verify_chain
from tests.evals.runs import finished_run

pytestmark = pytest.mark.django_db

APPROVE = "/api/v1/tenants/acme/adapters/support/versions/1/approve/"
RUNS = "/api/v1/tenants/acme/adapters/support/versions/1/eval-runs/"
GOOD = {"greet": ("hello there", "hello"), "refund": ("30 days", "30 days"), "free": ("x", "y")}
MUST_PASS_FAILS = {**GOOD, "refund": ("whenever you like", "30 days")}


def _error(response):
    return response.status_code, response.json()["error"]["code"]


def test_approval_waits_for_a_finished_run(world, gated):
    response = world.client("rita").post(APPROVE, {})
    assert _error(response) == (409, "version.eval_gate_failed")
    assert [c["name"] for c in response.json()["error"]["details"]["unmet"]] == ["run_finished"]
    assert AdapterVersion.objects.get(pk=gated[0].pk).status == "validated"


def test_a_failed_must_pass_case_is_refused_until_a_second_reviewer_overrides(world, gated):
    version, suite = gated
    finished_run(version, suite, MUST_PASS_FAILS)
    refused = world.client("rita").post(APPROVE, {"comment": "looks fine"})
    assert _error(refused) == (409, "version.eval_gate_failed")
    assert "must-pass cases failed: refund" in refused.json()["error"]["message"]
    unmet = [c["name"] for c in refused.json()["error"]["details"]["unmet"]]
    assert unmet == ["must_pass", "max_regression_points"]  # 50 points: refund regressed
    assert GateRefusal.objects.get().actor == world.users["rita"]

    # The reviewer who was refused cannot wave it through; the next one needs a reason.
    own = world.client("rita").post(APPROVE, {"override_eval_gate": True, "reason": "fine"})
    assert _error(own) == (403, "eval_gate.override_same_reviewer")
    bare = world.client("rob").post(APPROVE, {"override_eval_gate": True}, format="json")
    assert _error(bare) == (400, "eval_gate.override_reason_required")
    assert AdapterVersion.objects.get(pk=version.pk).status == "validated"

    response = world.client("rob").post(
        APPROVE, {"override_eval_gate": True, "reason": "refund wording changed"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "staged"
    gate = Decision.objects.get(version=version, kind="approve").evidence["eval_gate"]
    assert gate["override"] == {
        "by": "rob",
        "reason": "refund wording changed",
        "first_reviewer": "rita",
        "unmet": ["must_pass", "max_regression_points"],
    }
    assert gate["suite_sha256"] == suite.sha256 and gate["verdict"]["passed"] is False
    assert AuditEvent.objects.filter(action="version.eval_gate_override").count() == 1
    assert AuditEvent.objects.filter(action="version.eval_gate_refused").count() == 1
    assert verify_chain().ok


def test_a_passing_run_lets_the_reviewer_approve_and_the_verdict_is_kept(world, gated):
    version, suite = gated
    finished_run(version, suite, GOOD)
    response = world.client("rita").post(APPROVE, {})
    assert response.status_code == 200, response.json()
    gate = Decision.objects.get(version=version, kind="approve").evidence["eval_gate"]
    assert gate["verdict"]["passed"] is True and gate["override"] is None


def test_the_gate_reads_the_cases_not_a_stored_summary(world, gated):
    """The gate is computed from the recorded cases each time, never from the run's stored
    summary: a verdict changed in the database shows at once (and the record catches it)."""
    version, suite = gated
    run = finished_run(version, suite, GOOD)
    row = EvalCaseResult.objects.get(run=run, case_id="refund", side="candidate")
    row.verdicts = {"regex": {"passed": False, "why": "edited"}}
    row.save()
    assert _error(world.client("rita").post(APPROVE, {})) == (409, "version.eval_gate_failed")


def test_the_run_shows_its_summary_gate_and_cases_side_by_side(world, gated):
    version, suite = gated
    run = finished_run(version, suite, MUST_PASS_FAILS)
    body = world.client("vera").get(f"{RUNS}{run.number}/").json()
    assert body["status"] == "finished" and body["suite_sha256"] == suite.sha256
    assert body["summary"]["must_pass_failed"] == ["refund"]
    assert body["summary"]["regressed"] == ["refund"]
    assert body["gate"]["passed"] is False
    cases = world.client("vera").get(f"{RUNS}{run.number}/cases/", {"tag": "policy"}).json()
    (refund,) = cases["cases"]
    assert refund["candidate"]["answer"] == "whenever you like"
    assert refund["baseline"]["answer"] == "30 days" and refund["regressed"] is True
    lines = world.client("vera").get(f"{RUNS}{run.number}/cases/", {"format": "jsonl"})
    assert lines["Content-Type"] == "application/x-ndjson"
    assert len(lines.content.decode().splitlines()) == 3
    assert world.client("charlie").get(f"{RUNS}{run.number}/").status_code == 404


def test_only_an_owner_sets_the_policy(world, gated):
    url = "/api/v1/tenants/acme/adapters/support/eval-policy/"
    response = world.client("bob").put(url, {"suite": "qa"}, format="json")
    assert response.status_code == 403
    assert world.client("bob").get(url).json()["min_pass_rate"] == 0.5
    missing = world.client("alice").put(url, {"suite": "nope"}, format="json")
    assert _error(missing) == (404, "suite.not_found")
