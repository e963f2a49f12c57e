"""Raising a budget: an owner asks, a platform admin who did not ask decides (four eyes), every
step audited; a raise for the rest of the window ends with the window."""

from __future__ import annotations

from datetime import timedelta

import pytest

from budgets import clock
from budgets.limits import window_limit
from budgets.models import Budget
from budgets.rules import load_rules
from budgets.selectors import budget_span, budget_status
from core.audit_models import AuditEvent
from tenants.models import Membership
from tests.budgets.spending import clear_budget_counts


@pytest.fixture(autouse=True)
def no_budget_counts():
    clear_budget_counts()


@pytest.fixture
def budget(world):
    return Budget.objects.create(tenant=world.acme, scope="tenant", tokens=1000, window="month")


def _url(budget):
    return f"/api/v1/tenants/acme/budgets/{budget.id}/raise-requests/"


def _ask(world, budget, who="alice", **body):
    body = {"tokens": 2000, "duration": "window", "reason": "launch week", **body}
    return world.client(who).post(_url(budget), body, format="json")


def _decide(world, raise_id, who, verb="approve", **body):
    return world.client(who).post(
        f"/api/v1/budget-raise-requests/{raise_id}/{verb}/", body, format="json"
    )


def test_an_owner_asks_and_another_admin_approves_for_the_rest_of_the_window(world, budget):
    asked = _ask(world, budget)
    assert asked.status_code == 201, asked.json()
    assert asked.json()["status"] == "pending" and asked.json()["previous_tokens"] == 1000
    approved = _decide(world, asked.json()["id"], "adam", comment="ok for the launch")
    assert approved.status_code == 200, approved.json()
    span = budget_span(budget, clock.now())
    assert approved.json()["window_end"] is not None and span.end is not None
    assert budget_status(budget).remaining == 2000
    assert window_limit(budget, span.start) == 2000
    # The next window is held to the budget's own tokens again, at the gateway too.
    next_span = budget_span(budget, span.end + timedelta(seconds=1))
    assert window_limit(budget, next_span.start) == 1000
    rule = load_rules().applying(world.acme.id, None, None)[0]
    assert (rule.limit(span), rule.limit(next_span)) == (2000, 1000)
    budget.refresh_from_db()
    assert budget.tokens == 1000
    actions = list(
        AuditEvent.objects.filter(action__startswith="budget_raise.").values_list(
            "action", flat=True
        )
    )
    assert actions == ["budget_raise.request", "budget_raise.approve"]


def test_a_permanent_raise_sets_the_budgets_tokens(world, budget):
    asked = _ask(world, budget, tokens=5000, duration="permanent")
    _decide(world, asked.json()["id"], "adam")
    budget.refresh_from_db()
    assert budget.tokens == 5000


def test_the_requester_may_not_decide_even_as_a_platform_admin(world, budget):
    Membership.objects.create(user=world.users["adam"], tenant=world.acme, role="owner")
    asked = _ask(world, budget, who="adam")
    assert asked.status_code == 201
    refused = _decide(world, asked.json()["id"], "adam")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "budget_raise.four_eyes"
    assert _decide(world, asked.json()["id"], "adam", "reject").status_code == 403
    from tests.factories import make_user

    make_user("ada", roles=("platform-admin",))
    world.users["ada"] = type(world.users["adam"]).objects.get(username="ada")
    assert _decide(world, asked.json()["id"], "ada").status_code == 200


def test_a_rejected_raise_changes_nothing_and_is_decided_once(world, budget):
    asked = _ask(world, budget).json()
    rejected = _decide(world, asked["id"], "adam", "reject", comment="not this month")
    assert rejected.json()["status"] == "rejected"
    again = _decide(world, asked["id"], "adam")
    assert again.status_code == 409 and again.json()["error"]["code"] == "budget_raise.decided"
    assert budget_status(budget).remaining == 1000


@pytest.mark.parametrize(
    "who, status, code",
    [
        ("bob", 403, "budget_raise.not_owner"),
        ("vera", 403, "budget_raise.not_owner"),
        ("adam", 403, "budget_raise.not_owner"),
        ("charlie", 404, "tenant.not_found"),
        ("nora", 404, "tenant.not_found"),
    ],
)
def test_only_the_tenants_owners_ask(world, budget, who, status, code):
    refused = _ask(world, budget, who=who)
    assert (refused.status_code, refused.json()["error"]["code"]) == (status, code)


def test_only_platform_admins_decide(world, budget):
    asked = _ask(world, budget).json()
    for who in ("alice", "rita", "olga", "charlie"):
        refused = _decide(world, asked["id"], who)
        assert refused.status_code == 403, who
    assert world.client("alice").get("/api/v1/budget-raise-requests/").status_code == 403
    pending = world.client("adam").get("/api/v1/budget-raise-requests/?status=pending").json()
    assert [r["id"] for r in pending["results"]] == [asked["id"]]


def test_another_tenants_budget_is_not_found(world, budget):
    theirs = Budget.objects.create(tenant=world.globex, scope="tenant", tokens=10, window="day")
    answer = world.client("alice").post(
        f"/api/v1/tenants/acme/budgets/{theirs.id}/raise-requests/",
        {"tokens": 20, "duration": "window", "reason": "x"},
        format="json",
    )
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "budget.not_found"
    assert world.client("charlie").get(_url(budget)).status_code == 404


@pytest.mark.parametrize(
    "body, code",
    [
        ({"tokens": 1000}, "budget_raise.not_a_raise"),
        ({"tokens": "lots"}, "budget_raise.invalid_tokens"),
        ({"duration": "forever"}, "budget_raise.invalid_duration"),
        ({"reason": "  "}, "budget_raise.no_reason"),
    ],
)
def test_bad_requests_say_why(world, budget, body, code):
    refused = _ask(world, budget, **body)
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, code)


def test_one_pending_request_per_budget_and_none_for_the_rest_of_a_total(world, budget):
    assert _ask(world, budget).status_code == 201
    second = _ask(world, budget, tokens=3000)
    assert second.status_code == 409 and second.json()["error"]["code"] == "budget_raise.pending"
    total = Budget.objects.create(tenant=world.acme, scope="alias:x", tokens=10, window="total")
    refused = _ask(world, total, tokens=20)
    assert refused.json()["error"]["code"] == "budget_raise.no_window"


def test_members_list_a_budgets_requests(world, budget):
    _ask(world, budget)
    listed = world.client("vera").get(_url(budget)).json()["results"]
    assert [(r["tokens"], r["requested_by"]) for r in listed] == [(2000, "alice")]
