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
