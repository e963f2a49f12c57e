"""`lora-portal eval`: a suite pushed (a bad one refused with its line), listed, and a version's
run shown with the gate's verdict (exit 2 when it refuses) and its cases exported as JSON Lines."""

from __future__ import annotations

import json

import pytest
from lora_portal_client import paths

from adapters.access import AccessContext
from adapters.models import AdapterVersion
from evals.models import EvalCaseResult
from evals.services.policies import policy_set
from tests.client.conftest import issue_token
from tests.client.test_client_contract import missing_from_schema
from tests.evals.runs import finished_run, suite_version
from tests.evals.suites import CASES, jsonl

pytestmark = pytest.mark.django_db(transaction=True)
MUST_PASS_FAILS = {"greet": ("hello", "hello"), "refund": ("later", "30 days"), "free": ("a", "b")}


def test_the_eval_paths_are_in_the_openapi_schema():
    assert missing_from_schema(paths.EVALS) == []


def test_a_suite_is_pushed_and_listed_and_a_run_shown_with_its_gate(cli, live_world, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(jsonl(*CASES) + b'{"id": "x", "prompt": "p", "tags": "one"}\n')
    done = cli("eval", "suite", "push", "acme", "qa", str(bad), who="bob")
    assert done.returncode == 2 and "Line 4: tags must be a list" in done.stderr
    good = tmp_path / "qa.jsonl"
    good.write_bytes(jsonl(*CASES))
    pushed = cli.json("eval", "suite", "push", "acme", "qa", str(good), who="bob")
    assert pushed["versions"][0]["case_count"] == 3
    (listed,) = cli.json("eval", "suite", "list", "acme", who="alice")
    assert listed["versions"][0]["sha256"] == pushed["versions"][0]["sha256"]

    world = live_world
    version = AdapterVersion.objects.create(
        tenant=world.acme,
        adapter=world.support,
        number=1,
        status="validated",
        served_name="acme--support--v1-0badc0de",
        manifest_sha256="ab" * 32,
        uploaded_by=world.users["bob"],
    )
    policy_set(
        access=AccessContext.for_user(world.users["alice"]), adapter=world.support, suite="qa"
    )
    finished_run(version, suite_version(world, jsonl(*CASES)), MUST_PASS_FAILS)
    shown = cli.json("eval", "show", "acme/support@1", who="alice", code=2)
    assert shown["status"] == "finished" and shown["gate"]["passed"] is False
    text = cli("eval", "show", "acme/support@1", who="alice")
    assert text.returncode == 2 and "NO must_pass: must-pass cases failed: refund" in text.stdout
    out = tmp_path / "cases.jsonl"
    assert (
        cli("eval", "show", "acme/support@1", "--cases", "-o", str(out), who="alice").returncode
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in rows] == ["greet", "refund", "free"] and rows[1]["regressed"]

    # rita is refused by the gate; rob overrides it with a reason.
    refused = cli("approve", "acme/support@1", who="rita")
    assert refused.returncode == 2 and "version.eval_gate_failed" in refused.stderr
    cli.tokens["rob"] = issue_token(world, "rob", ["read", "approve"])
    approved = cli.json("eval", "override", "acme/support@1", "--reason", "agreed", who="rob")
    assert approved["status"] == "staged"


def test_a_run_is_started_and_waited_for_with_the_gates_exit_code(cli, live_world):
    """`eval run` starts it (the session's worker runs it); `eval wait` follows it to its end.
    This world has no engine: every answer fails with its reason, so the must-pass case fails
    and the gate refuses (exit 2)."""
    world = live_world
    AdapterVersion.objects.create(
        tenant=world.acme,
        adapter=world.support,
        number=1,
        status="validated",
        served_name="acme--support--v1-0badc0df",
        manifest_sha256="cd" * 32,
        uploaded_by=world.users["bob"],
    )
    suite_version(world, jsonl(*CASES))
    policy_set(
        access=AccessContext.for_user(world.users["alice"]), adapter=world.support, suite="qa"
    )
    started = cli.json("eval", "run", "acme/support@1", who="bob")
    assert started["id"] == 1 and started["status"] in ("queued", "running", "finished")
    waited = cli("eval", "wait", "acme/support@1", "--interval", "0.2", who="alice")
    assert waited.returncode == 2, waited.stderr
    assert "run 1: finished (3/3 cases)" in waited.stdout and "NO must_pass" in waited.stdout
    errors = EvalCaseResult.objects.filter(side="candidate").values_list("error", flat=True)
    assert len(errors) == 3 and all(errors), errors  # each case says why it has no answer
