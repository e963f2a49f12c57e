"""The eval gate holds against the person it checks: the uploader cannot rewrite the suite that
judges them (the policy holds an owner-chosen suite version, and the gate counts runs on it
only), an override comes from another person (not another account of a refused reviewer, at any
refusal), and the gate's forms are offered only to those who may save them."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from adapters.models import AdapterVersion
from core.audit_models import AuditEvent
from evals.models import EvalPolicy, EvalRun
from evals.services.runs import run_finish, run_record_case
from portal.audit_verify import verify_chain
from tenants.sso.models import SsoIdentity
from tests.evals.runs import finished_run
from tests.evals.suites import CASES, jsonl, push
from tests.evals.test_gate import GOOD, MUST_PASS_FAILS

pytestmark = pytest.mark.django_db

POLICY = "/api/v1/tenants/acme/adapters/support/eval-policy/"
RUNS = "/api/v1/tenants/acme/adapters/support/versions/1/eval-runs/"
APPROVE = "/api/v1/tenants/acme/adapters/support/versions/1/approve/"
PAGE = "/t/acme/a/support/v/1/"
# The uploader's rewrite: the same cases, the must-pass refund case no longer must pass nor
# scored, so a candidate that gets it wrong passes every criterion.
REWRITE = jsonl(
    *[
        {k: v for k, v in c.items() if k not in ("must_pass", "expect")}
        if c["id"] == "refund"
        else c
        for c in CASES
    ]
)


def _run_as_the_worker_would(run: EvalRun, answers: dict[str, tuple[str, str]]) -> EvalRun:
    """The started run's cases answered (the engines' part, recorded through the run services)
    and the run closed: the runner's own steps, on whichever suite version the run names."""
    for case in run.suite_version.cases:
        candidate, baseline = answers[case["id"]]
        run_record_case(run=run, case=case, side="candidate", answer=candidate)
        run_record_case(run=run, case=case, side="baseline", answer=baseline)
    return run_finish(run=run)


def test_the_uploader_cannot_rewrite_the_suite_that_judges_them(world, gated, monkeypatch):
    """The attack, end to end: bob (a maintainer, who uploaded support@1) uploads the policy's
    suite again without its must-pass case, starts a run, and a reviewer approves."""
    from evals.services import runner

    monkeypatch.setattr(runner, "_enqueue", lambda run_id: None)  # the test plays the worker
    version, pinned = gated
    bob = world.client("bob")
    assert push(bob, "acme", "qa", REWRITE).status_code == 201  # qa@2: any maintainer may
    started = bob.post(RUNS)
    assert started.status_code == 201, started.json()
    assert started.json()["suite_version"] == pinned.number == 1  # the owner's, not bob's
    run = EvalRun.objects.get(version=version, number=started.json()["id"])
    _run_as_the_worker_would(run, MUST_PASS_FAILS)

    refused = world.client("rita").post(APPROVE, {})
    assert refused.status_code == 409, refused.json()
    assert refused.json()["error"]["code"] == "version.eval_gate_failed"
    assert "must_pass" in [c["name"] for c in refused.json()["error"]["details"]["unmet"]]
    assert AdapterVersion.objects.get(pk=version.pk).status == "validated"

    # Nor can bob move the policy to his version: that is an owner's choice.
    moved = bob.put(POLICY, {"suite": "qa", "suite_version": 2}, format="json")
    assert moved.status_code == 403 and moved.json()["error"]["code"] == "eval_policy.not_allowed"
    assert EvalPolicy.objects.get().suite_version == pinned


def test_a_run_on_another_suite_version_never_counts(world, gated):
    version, pinned = gated
    assert push(world.client("bob"), "acme", "qa", REWRITE).status_code == 201
    rewrite = pinned.suite.versions.get(number=2)
    finished_run(version, rewrite, MUST_PASS_FAILS)  # passes on the rewrite, not the gate's
    refused = world.client("rita").post(APPROVE, {})
    assert refused.status_code == 409
    assert [c["name"] for c in refused.json()["error"]["details"]["unmet"]] == ["run_finished"]


def test_a_new_suite_version_is_the_gates_once_an_owner_moves_the_policy(world, gated):
    version, pinned = gated
    assert push(world.client("bob"), "acme", "qa", REWRITE).status_code == 201
    alice = world.client("alice")
    # Saving the thresholds again keeps the version the policy holds.
    kept = alice.put(POLICY, {"suite": "qa", "min_pass_rate": 0.5}, format="json")
    assert kept.status_code == 200 and kept.json()["suite_version"] == 1

    html = world.client("rita").get(PAGE).content.decode()
    assert 'data-testid="eval-suite-pin"' in html and "suite <strong>qa@1</strong>" in html
    assert "qa@2 (uploaded by bob" in html and "not the gate's until an owner moves" in html

    moved = alice.put(POLICY, {"suite": "qa", "suite_version": 2}, format="json")
    assert moved.status_code == 200, moved.json()
    body = moved.json()
    assert (body["suite_version"], body["suite_version_set_by"]) == (2, "alice")
    event = AuditEvent.objects.get(action="eval_policy.suite_moved")
    assert (event.before or {}).get("suite_version") == 1
    assert (event.after or {}).get("suite_version") == 2
    assert event.actor_id == world.users["alice"].pk
    html = world.client("rita").get(PAGE).content.decode()
    assert "suite <strong>qa@2</strong>" in html and 'data-testid="eval-suite-newer"' not in html
    # A run on qa@1 no longer counts; one on qa@2 does.
    finished_run(version, pinned, GOOD)
    assert world.client("rita").post(APPROVE, {}).status_code == 409
    missing = alice.put(POLICY, {"suite": "qa", "suite_version": 9}, format="json")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "suite.version_not_found"
    assert verify_chain().ok


def test_existing_policies_are_pinned_to_their_suites_latest_version_by_the_migration(world, gated):
    from importlib import import_module

    from django.apps import apps

    version, pinned = gated
    assert push(world.client("bob"), "acme", "qa", REWRITE).status_code == 201
    EvalPolicy.objects.update(suite_version=pinned)
    migration = import_module("evals.migrations.0004_policy_pins_suite_version")
    migration.pin_to_latest(apps, None)
    assert EvalPolicy.objects.get().suite_version.number == 2


# --- item 3: an override comes from another person ---


def _twin(world, of: str, name: str) -> object:
    """An SSO account of the same person as `of`: its provider verified `of`'s e-mail."""
    User = get_user_model()
    User.objects.filter(username=of).update(email=f"{of}@acme.test")
    twin = User.objects.create_user(username=name)
    twin.groups.set([Group.objects.get_or_create(name="reviewer")[0]])
    SsoIdentity.objects.create(
        user=twin,
        provider="corp",
        issuer="https://idp.example.test",
        subject=f"sub-{name}",
        verified_email=f"{of.upper()}@ACME.test",
    )
    world.users[name] = twin
    return twin


def _override(world, who: str) -> tuple[int, str]:
    response = world.client(who).post(
        APPROVE, {"override_eval_gate": True, "reason": "wording"}, format="json"
    )
    body = response.json()
    return response.status_code, body.get("error", {}).get("code", body.get("status"))


def test_a_refused_reviewer_cannot_override_through_another_account(world, gated):
    version, suite = gated
    finished_run(version, suite, MUST_PASS_FAILS)
    _twin(world, "rita", "rita-sso")
    assert world.client("rita").post(APPROVE, {}).status_code == 409
    assert _override(world, "rita-sso") == (403, "eval_gate.override_same_reviewer")
    assert AdapterVersion.objects.get(pk=version.pk).status == "validated"
    # The override form is not offered to her other account either.
    html = world.client("rita-sso").get(PAGE).content.decode()
    assert 'data-testid="override-form"' not in html
    assert 'data-testid="override-form"' in world.client("rob").get(PAGE).content.decode()


def test_every_refusal_counts_not_only_the_first(world, gated):
    version, suite = gated
    finished_run(version, suite, MUST_PASS_FAILS)
    _twin(world, "rob", "rob-sso")
    assert world.client("rita").post(APPROVE, {}).status_code == 409
    assert world.client("rob").post(APPROVE, {}).status_code == 409  # the latest refusal
    assert _override(world, "rob") == (403, "eval_gate.override_same_reviewer")
    assert _override(world, "rob-sso") == (403, "eval_gate.override_same_reviewer")
    third = get_user_model().objects.create_user(username="ruth")
    third.groups.set([Group.objects.get_or_create(name="reviewer")[0]])
    world.users["ruth"] = third
    assert _override(world, "ruth") == (200, "staged")
    evidence = AuditEvent.objects.get(action="version.eval_gate_override").after or {}
    assert evidence.get("by") == "ruth" and evidence.get("first_reviewer") == "rita"


# --- item 13: the gate's forms only for those who may save them ---


def test_the_evals_page_offers_the_policy_form_to_owners_only(world, gated):
    def form_shown(who: str) -> bool:
        html = world.client(who).get("/t/acme/evals/").content.decode()
        assert "support" in html, who  # each sees the gate itself
        return 'name="min_pass_rate"' in html

    assert form_shown("alice")
    assert not form_shown("rita")  # a platform reviewer reads the gate, never sets it
    assert not form_shown("bob")  # the uploader, least of all
    assert not form_shown("vera")
    # The page's POST and the API refuse on the same rule.
    page = world.client("rita").post(
        "/t/acme/evals/policy/", {"adapter": "support", "suite_version": "qa@1"}
    )
    assert page.status_code in (403, 404)
    api = world.client("rita").put(POLICY, {"suite": "qa"}, format="json")
    assert api.status_code in (403, 404)
    saved = world.client("alice").post(
        "/t/acme/evals/policy/",
        {"adapter": "support", "suite_version": "qa@1", "pairwise_ties_pass": "1"},
    )
    assert saved.status_code == 302
    assert EvalPolicy.objects.get().pairwise_ties_pass is True
    assert json.loads(json.dumps(world.client("alice").get(POLICY).json()))["suite_version"] == 1


@pytest.mark.parametrize("number", [0, 2**31, "two"])
def test_a_suite_version_out_of_range_is_a_400(world, gated, number):
    response = world.client("alice").put(
        POLICY, {"suite": "qa", "suite_version": number}, format="json"
    )
    assert response.status_code == 400, response.json()
    page = world.client("alice").post(
        "/t/acme/evals/policy/", {"adapter": "support", "suite_version": f"qa@{number}999999999"}
    )
    assert page.status_code == 400 and "Choose a suite version" in page.content.decode()
