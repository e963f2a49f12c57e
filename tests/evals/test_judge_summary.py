"""The judge's outcomes as a run shows them: its summary on the API and the version page count
wins, real ties, splits (the two orders disagreed), losses and unreadable replies apart, and the
gate passes ties only when the policy says so."""

from __future__ import annotations

import pytest

from evals.models import EvalPolicy
from evals.services.runs import run_create, run_finish, run_record_case

pytestmark = pytest.mark.django_db

RUN = "/api/v1/tenants/acme/adapters/support/versions/1/eval-runs/1/"
PAGE = "/t/acme/a/support/v/1/"
POLICY = "/api/v1/tenants/acme/adapters/support/eval-policy/"


def test_splits_ties_and_unreadable_replies_are_counted_apart(world, gated):
    version, suite = gated
    alice = world.client("alice")
    assert (
        alice.put(
            POLICY, {"suite": "qa", "min_pairwise_win_or_tie": 0.5}, format="json"
        ).status_code
        == 200
    )
    run = run_create(version=version, suite_version=suite, baseline="base", engines=["cpu-1"])
    judged = {"greet": "tie", "refund": "split", "free": "unreadable"}
    for case in suite.cases:
        run_record_case(run=run, case=case, side="candidate", answer="hello 30 days")
        run_record_case(run=run, case=case, side="baseline", answer="hello 30 days")
        run_record_case(run=run, case=case, side="judge", answer=judged[case["id"]])
    run_finish(run=run)

    body = alice.get(RUN).json()
    assert body["summary"]["pairwise"] == {
        "win": 0,
        "tie": 1,
        "split": 1,
        "loss": 0,
        "unreadable": 1,
    }
    pairwise = next(c for c in body["gate"]["criteria"] if c["name"] == "min_pairwise_win_or_tie")
    assert pairwise["passed"] is False and pairwise["actual"] == 0.0  # ties do not pass
    assert "splits 1, unreadable 1" in pairwise["message"]
    html = world.client("rita").get(PAGE).content.decode()
    assert "tie 1 (TIE in both orders), split 1 (the orders disagreed)" in html
    assert "unreadable 1" in html

    # An owner lets ties pass: one tie of three judged is a third; splits never pass.
    alice.put(
        POLICY,
        {"suite": "qa", "min_pairwise_win_or_tie": 0.3, "pairwise_ties_pass": True},
        format="json",
    )
    assert EvalPolicy.objects.get().pairwise_ties_pass is True
    pairwise = next(
        c
        for c in alice.get(RUN).json()["gate"]["criteria"]
        if c["name"] == "min_pairwise_win_or_tie"
    )
    assert pairwise["passed"] is True and round(pairwise["actual"], 3) == 0.333
