"""The compliance record carries the eval runs (suite and version hashes, verdicts, the digest
of every case) and the gate's outcome with its override; it stops verifying when a verdict is
changed, in the file (the signature) or in the database (the chained digest)."""

from __future__ import annotations

import copy

import pytest
from lora_portal_client.evidence import PinnedKeys, verify_record

from evals.models import EvalCaseResult
from portal.evidence_check import check_record
from portal.evidence_signing import portal_keys
from tests.evals.runs import finished_run
from tests.evals.test_gate import APPROVE, MUST_PASS_FAILS

pytestmark = pytest.mark.django_db
RECORD = "/api/v1/tenants/acme/adapters/support/versions/1/evidence/"


def test_the_record_carries_the_run_and_the_override_and_catches_a_changed_verdict(world, gated):
    version, suite = gated
    run = finished_run(version, suite, MUST_PASS_FAILS)
    world.client("rita").post(APPROVE, {})
    world.client("rob").post(APPROVE, {"override_eval_gate": True, "reason": "ok"}, format="json")
    record = world.client("alice").get(RECORD).json()
    (entry,) = record["evals"]["runs"]
    assert (
        entry["suite_sha256"] == suite.sha256 and entry["version_sha256"] == version.manifest_sha256
    )
    assert entry["verdict"]["passed"] is False and entry["summary"]["must_pass_failed"] == [
        "refund"
    ]
    approve = next(d for d in record["decisions"] if d["kind"] == "approve")
    assert approve["saw"]["eval_gate"]["override"]["by"] == "rob"
    assert "eval_run.finish" in {e["action"] for e in record["audit_events"]}
    pinned = PinnedKeys.parse(portal_keys())
    assert verify_record(record, pinned=pinned) == [] and check_record(record) == []

    # In the file: the verdict flipped to passed.
    tampered = copy.deepcopy(record)
    tampered["evals"]["runs"][0]["verdict"]["passed"] = True
    assert "evals: content differs from its digest (changed after export)" in verify_record(
        tampered, pinned=pinned
    )
    # In the database: the must-pass case's verdict made a pass.
    row = EvalCaseResult.objects.get(run=run, case_id="refund", side="candidate")
    row.verdicts = {"regex": {"passed": True, "why": ""}}
    row.save()
    assert check_record(record) == [
        "eval run 1: its cases or verdicts changed after it finished",
        "eval run 1: its cases differ from the record's",
    ]


def test_the_records_page_says_what_each_decider_saw_in_words(world, gated):
    version, suite = gated
    finished_run(version, suite, MUST_PASS_FAILS)
    world.client("rita").post(APPROVE, {})
    world.client("rob").post(APPROVE, {"override_eval_gate": True, "reason": "ok"}, format="json")
    html = world.client("alice").get("/t/acme/a/support/v/1/evidence/").content.decode()
    assert "Eval gate: failed on run 1" in html and "must-pass cases failed: refund" in html
    assert "Gate overridden by rob (the gate refused rita first): “ok”" in html
    assert "Validation: valid" in html and "{&#x27;validation_report&#x27;" not in html
    assert 'data-testid="evidence-evals"' in html
