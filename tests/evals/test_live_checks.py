"""Live checks (evals.scoring.live_checks): each check on an answer, the refusal of a bad spec,
and the eval policy's API keeping them."""

from __future__ import annotations

import pytest

from evals.models import EvalPolicy
from evals.scoring.live_checks import check_live_checks, passes, score_live
from evals.scoring.scorers import ExpectError

SPEC = {
    "json": True,
    "json_schema": {"type": "object", "required": ["answer"]},
    "regex": "answer",
    "not_contains": ["BANNED"],
    "max_chars": 40,
    "refusals": ["I cannot help"],
}


def test_an_answer_passes_only_when_every_check_does():
    assert passes('{"answer": "tea"}', SPEC)
    verdicts = score_live('{"answer": "BANNED, and I CANNOT HELP with that"}', SPEC)
    failed = {name for name, v in verdicts.items() if not v.passed}
    assert failed == {"not_contains", "max_chars", "refusals"}
    assert not passes("not json at all, answer", {"json": True})
    assert passes("anything", {})


@pytest.mark.parametrize(
    "spec",
    [
        [],
        {"exact": "x"},
        {"max_chars": 0},
        {"max_chars": True},
        {"refusals": []},
        {"regex": "("},
        {"json_schema": {"patternProperties": {}}},
    ],
)
def test_a_spec_no_check_can_use_is_refused(spec):
    with pytest.raises(ExpectError):
        check_live_checks(spec)


@pytest.mark.django_db
def test_the_policy_api_keeps_live_checks_and_refuses_bad_ones(gated):
    url = "/api/v1/tenants/acme/adapters/support/eval-policy/"
    policy = EvalPolicy.objects.get()
    client_owner = gated_client(policy)
    bad = client_owner.put(url, {"suite": "qa", "live_checks": {"max_chars": -1}}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "eval_policy.bad_live_checks"
    assert EvalPolicy.objects.get().live_checks == {}
    ok = client_owner.put(
        url, {"suite": "qa", "live_checks": {"not_contains": ["BANNED"]}}, format="json"
    )
    assert ok.status_code == 200 and ok.json()["live_checks"] == {"not_contains": ["BANNED"]}
    assert EvalPolicy.objects.get().live_checks == {"not_contains": ["BANNED"]}


def gated_client(policy):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(policy.updated_by)
    return client
