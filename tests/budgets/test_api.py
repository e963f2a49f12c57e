"""The budgets API: validation with clear codes (another tenant's token or alias is not told
apart from none), where a budget stands this window, edits and removal audited."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from adapters.models import Alias
from budgets.models import Budget, BudgetSpend
from budgets.windows import window_at
from core.audit_models import AuditEvent
from tenants.models import ApiToken
from tests.factories import build_world
from workers import shared_state
from workers.redis_contract.keys import budget_key

pytestmark = pytest.mark.django_db

URL = "/api/v1/tenants/acme/budgets/"


@pytest.fixture
def world():
    return build_world()


def _post(world, body, who="alice"):
    return world.client(who).post(URL, body, format="json")


def _forget_counts():
    client = shared_state.client()
    for key in client.scan_iter(match=budget_key(0, 0).rsplit(":", 2)[0] + ":*"):
        client.delete(key)


def test_it_sets_a_budget_and_audits_it(world):
    _forget_counts()
    response = _post(world, {"scope": "tenant", "tokens": 5000, "window": "day"}, "adam")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["thresholds"] == [50, 80, 100]
    assert body["used"] == 0 and body["remaining"] == 5000 and body["resets_at"]
    assert AuditEvent.objects.filter(action="budget.create").count() == 1


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"scope": "everyone", "tokens": 5}, "budget.invalid_scope"),
        ({"scope": "tenant", "tokens": 0}, "budget.invalid_tokens"),
        ({"scope": "tenant", "tokens": "5"}, "budget.invalid_tokens"),
        ({"scope": "tenant", "tokens": 5, "window": "year"}, "budget.invalid_window"),
        ({"scope": "tenant", "tokens": 5, "thresholds": [50, 50]}, "budget.invalid_thresholds"),
        ({"scope": "tenant", "tokens": 5, "thresholds": [0]}, "budget.invalid_thresholds"),
        ({"scope": "alias:nope", "tokens": 5}, "budget.unknown_alias"),
        ({"scope": "token:999999", "tokens": 5}, "budget.unknown_token"),
    ],
)
def test_bad_input_is_a_400_with_its_code(world, body, code):
    response = _post(world, body, "adam")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert not Budget.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="budget.").exists()


def test_another_tenants_token_or_alias_is_unknown_here(world):
    Alias.objects.create(tenant=world.globex, name="legal-bot")
    token = ApiToken.objects.create(
        user=world.users["charlie"], tenant=world.globex, prefix="globex1", secret_hash="x"
    )
    for scope, code in (
        ("alias:legal-bot", "budget.unknown_alias"),
        (f"token:{token.pk}", "budget.unknown_token"),
    ):
        response = _post(world, {"scope": scope, "tokens": 5})
        assert response.status_code == 400 and response.json()["error"]["code"] == code
        assert "globex" not in response.json()["error"]["message"]


def test_a_second_budget_for_the_same_scope_and_window_is_refused(world):
    assert _post(world, {"scope": "tenant", "tokens": 5}, "adam").status_code == 201
    response = _post(world, {"scope": "tenant", "tokens": 9}, "adam")
    assert response.status_code == 400 and response.json()["error"]["code"] == "budget.duplicate"


def test_the_detail_says_where_the_window_stands(world):
    budget = Budget.objects.create(tenant=world.acme, scope="tenant", tokens=1000, window="month")
    now = datetime.now(UTC)
    span = window_at("month", now)
    BudgetSpend.objects.create(budget=budget, window_start=span.start, tokens=250)
    shared_state.client().delete(budget_key(budget.id, span.key))  # Redis has nothing yet
    body = world.client("vera").get(f"{URL}{budget.pk}/").json()
    assert body["used"] == 250 and body["reserved"] == 0 and body["remaining"] == 750
    assert span.end is not None and body["resets_at"].startswith(span.end.strftime("%Y-%m-%d"))
    assert (
        body["forecast_exhausted_at"] is None
        or body["forecast_exhausted_at"] > body["window_start"]
    )


def test_a_viewer_sees_but_cannot_set_and_another_tenant_gets_404(world):
    budget = Budget.objects.create(tenant=world.acme, scope="tenant", tokens=1000)
    assert world.client("vera").get(URL).status_code == 200
    assert (
        _post(world, {"scope": "tenant", "tokens": 5, "window": "day"}, "vera").status_code == 403
    )
    assert world.client("charlie").get(f"{URL}{budget.pk}/").status_code == 404
    other = world.client("charlie").get(f"/api/v1/tenants/globex/budgets/{budget.pk}/")
    assert other.status_code == 404 and other.json()["error"]["code"] == "budget.not_found"


def test_price_cards_are_set_by_platform_admins(world):
    response = world.client("adam").put(
        "/api/v1/price-cards/",
        {"base_model": world.base.name, "prompt_weight": "0.5", "completion_weight": "2"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["completion_weight"] == "2.0000"
    bad = world.client("adam").put(
        "/api/v1/price-cards/",
        {"base_model": world.base.name, "prompt_weight": "-1"},
        format="json",
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "price_card.invalid"
    refused = world.client("alice").put(
        "/api/v1/price-cards/", {"base_model": world.base.name}, format="json"
    )
    assert refused.json()["error"]["code"] == "price_card.not_allowed"


def _refused_as_ceiling(response) -> None:
    assert response.status_code == 403, response.json()
    error = response.json()["error"]
    assert error["code"] == "budget.tenant_ceiling"
    assert "platform admin" in error["message"] and "raise" in error["message"]


def test_an_owner_sets_token_and_alias_budgets_but_not_the_tenant_ceiling(world):
    Alias.objects.create(tenant=world.acme, name="support-bot")
    alias = _post(world, {"scope": "alias:support-bot", "tokens": 500, "window": "day"})
    assert alias.status_code == 201, alias.json()
    raised = world.client("alice").patch(
        f"{URL}{alias.json()['id']}/", {"tokens": 900}, format="json"
    )
    assert raised.status_code == 200 and raised.json()["tokens"] == 900
    removed = world.client("alice").delete(f"{URL}{alias.json()['id']}/")
    assert removed.status_code == 204
    _refused_as_ceiling(_post(world, {"scope": "tenant", "tokens": 5000}))
    assert not Budget.objects.filter(scope="tenant").exists()
    assert [e.action for e in AuditEvent.objects.filter(action__startswith="budget.")] == [
        "budget.create",
        "budget.update",
        "budget.delete",
    ]


def test_an_owner_lowers_the_tenant_budget_and_nothing_more(world):
    budget = Budget.objects.create(tenant=world.acme, scope="tenant", tokens=1000, window="month")
    detail, alice = f"{URL}{budget.pk}/", world.client("alice")
    lowered = alice.patch(detail, {"tokens": 800, "thresholds": [90]}, format="json")
    assert lowered.status_code == 200 and lowered.json()["tokens"] == 800
    for change in (
        {"tokens": 801},  # a raise, even back to where it was
        {"window": "day"},  # the same tokens every day: more a month
        {"tokens": 100, "window": "week"},
        {"scope": "alias:support-bot"},  # the ceiling gone
    ):
        Alias.objects.get_or_create(tenant=world.acme, name="support-bot")
        _refused_as_ceiling(alice.patch(detail, change, format="json"))
    _refused_as_ceiling(alice.delete(detail))
    budget.refresh_from_db()
    assert (budget.scope, budget.tokens, budget.window) == ("tenant", 800, "month")
    # An alias budget moved onto the tenant scope would create the ceiling.
    alias = Budget.objects.create(tenant=world.acme, scope="alias:support-bot", tokens=5)
    moved = alice.patch(f"{URL}{alias.pk}/", {"scope": "tenant", "window": "week"}, format="json")
    _refused_as_ceiling(moved)
    assert AuditEvent.objects.filter(action="budget.update").count() == 1


def test_a_platform_admin_creates_raises_and_removes_the_tenant_budget(world):
    adam = world.client("adam")
    created = _post(world, {"scope": "tenant", "tokens": 1000, "window": "month"}, "adam")
    assert created.status_code == 201, created.json()
    detail = f"{URL}{created.json()['id']}/"
    assert adam.patch(detail, {"tokens": 5000}, format="json").json()["tokens"] == 5000
    assert adam.delete(detail).status_code == 204
    events = AuditEvent.objects.filter(action__startswith="budget.").order_by("id")
    assert [(e.action, e.actor_id) for e in events] == [
        ("budget.create", world.users["adam"].pk),
        ("budget.update", world.users["adam"].pk),
        ("budget.delete", world.users["adam"].pk),
    ]
