"""The budgets pages: a tenant's (where each budget stands, its burn-down, alerts, raises) and
the platform's (pending raises; the requester is not offered the decision)."""

from __future__ import annotations

import json
import re

import pytest

from adapters.access import AccessContext
from budgets import clock
from budgets.alerts import send_budget_alerts
from budgets.models import Budget
from budgets.raises import raise_request_create
from tenants.models import Membership
from tests.budgets.spending import clear_budget_counts, spend


@pytest.fixture(autouse=True)
def no_budget_counts():
    clear_budget_counts()


@pytest.fixture
def spent(world):
    budget = Budget.objects.create(
        tenant=world.acme, scope="alias:support-bot", tokens=1000, window="month"
    )
    now = clock.now()
    spend(budget, 600, now)
    send_budget_alerts(now)
    return budget


def test_the_tenant_page_shows_where_each_budget_stands(world, spent):
    raise_request_create(
        access=AccessContext.for_user(world.users["alice"]),
        budget=spent,
        tokens=2000,
        duration="window",
        reason="launch week",
    )
    page = world.client("vera").get("/t/acme/budgets/").content.decode()
    assert "alias:support-bot" in page
    assert "600 of 1,000 tokens (60%)" in page
    assert re.search(r'data-testid="remaining">400<', page)
    assert "50% ·" in page  # the alert told this window
    assert "1,000 → 2,000" in page and "launch week" in page
    chart = re.search(r'<script id="burn-down-\d+" type="application/json">(.*?)</script>', page)
    assert chart is not None
    series = json.loads(chart.group(1))
    assert series["limit"] == 1000 and series["left"][-1][1] == 400
    assert 'action="/t/acme/budgets/' not in page  # a viewer: no forms


def test_an_owner_asks_for_a_raise_from_the_page(world, spent):
    client = world.client("alice")
    answer = client.post(
        f"/t/acme/budgets/{spent.id}/raise/",
        {"tokens": "3000", "duration": "permanent", "reason": "more users"},
    )
    assert answer.status_code == 302
    assert spent.raise_requests.get().tokens == 3000


def test_the_platform_page_offers_the_decision_to_another_admin_only(world, spent):
    Membership.objects.create(user=world.users["adam"], tenant=world.acme, role="owner")
    asked = raise_request_create(
        access=AccessContext.for_user(world.users["adam"]),
        budget=spent,
        tokens=2000,
        duration="window",
        reason="launch week",
    )
    page = world.client("adam").get("/platform/budgets/").content.decode()
    assert "you asked: another platform admin decides" in page
    refused = world.client("adam").post(
        f"/platform/budgets/raises/{asked.id}/decide/", {"decision": "approve"}
    )
    assert refused.status_code == 403 and b"another platform admin" in refused.content
    from tests.factories import make_user

    world.users["ada"] = make_user("ada", roles=("platform-admin",))
    other = world.client("ada")
    assert b'value="approve"' in other.get("/platform/budgets/").content
    assert (
        other.post(
            f"/platform/budgets/raises/{asked.id}/decide/", {"decision": "approve"}
        ).status_code
        == 302
    )
    asked.refresh_from_db()
    assert asked.status == "approved"


def _card(page: str, budget: Budget) -> str:
    """The HTML of one budget's card on a budgets page."""
    found = re.search(rf'data-testid="budget-{budget.id}">(.*?)</section>', page, re.S)
    assert found is not None, f"no card of budget {budget.id}"
    return found.group(1)


def _offers(card: str) -> dict[str, bool]:
    return {
        "tokens": re.search(r'<input name="tokens"[^>]*value=', card) is not None,
        "remove": 'name="delete"' in card,
        "thresholds": 'name="thresholds"' in card,
        "raise": "/raise/" in card,
    }


@pytest.fixture
def ceiling(world):
    return Budget.objects.create(tenant=world.acme, scope="tenant", tokens=5000, window="month")


def test_an_owner_is_not_offered_the_tenant_ceiling_but_asked_to_request_a_raise(
    world, spent, ceiling
):
    page = world.client("alice").get("/t/acme/budgets/").content.decode()
    tenant_card = _card(page, ceiling)
    assert _offers(tenant_card) == {
        "tokens": False,
        "remove": False,
        "thresholds": True,
        "raise": True,
    }
    assert 'data-testid="ceiling-note"' in tenant_card
    assert _offers(_card(page, spent)) == {
        "tokens": True,
        "remove": True,
        "thresholds": True,
        "raise": True,
    }
    assert 'placeholder="token:ID or alias:NAME" value=""' in page  # no scope it may not set
    # What was hidden is refused by the same rule (the page's form is no way around it).
    refused = world.client("alice").post(f"/t/acme/budgets/{ceiling.id}/edit/", {"delete": "1"})
    assert refused.status_code == 403 and b"budget.tenant_ceiling" in refused.content
    assert Budget.objects.filter(pk=ceiling.pk).exists()


def test_a_platform_admin_is_offered_the_tenant_ceiling(world, spent, ceiling):
    page = world.client("adam").get("/t/acme/budgets/").content.decode()
    for budget in (ceiling, spent):
        offers = _offers(_card(page, budget))
        assert offers["tokens"] and offers["remove"] and offers["thresholds"]
        assert not offers["raise"]  # a platform admin is no owner: they set it
    assert 'value="tenant"' in page  # the set form starts at the ceiling
    answer = world.client("adam").post(
        f"/t/acme/budgets/{ceiling.id}/edit/", {"tokens": "9000", "thresholds": "50,100"}
    )
    assert answer.status_code == 302
    ceiling.refresh_from_db()
    assert ceiling.tokens == 9000


def test_an_owner_lowers_no_ceiling_by_the_page_but_changes_its_alerts(world, ceiling):
    answer = world.client("alice").post(
        f"/t/acme/budgets/{ceiling.id}/edit/", {"thresholds": "25,75"}
    )
    assert answer.status_code == 302
    ceiling.refresh_from_db()
    assert ceiling.thresholds == [25, 75] and ceiling.tokens == 5000
