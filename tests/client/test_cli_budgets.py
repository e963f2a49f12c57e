"""`lora-portal budget list|set|request-raise` against a live portal: a tenant budget set by a
platform admin then changed (an owner's raise refused), listed with where it stands, a raise asked
for by an owner and refused to a maintainer."""

from __future__ import annotations

import pytest
from lora_portal_client import paths

from budgets.models import Budget, BudgetRaiseRequest
from tests.budgets.spending import clear_budget_counts
from tests.client.conftest import issue_token
from tests.client.test_client_contract import missing_from_schema

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_budget_paths_are_in_the_openapi_schema():
    assert missing_from_schema(paths.BUDGET_PATHS) == []


def test_a_budget_is_set_listed_and_a_raise_asked_for(cli, live_world):
    clear_budget_counts()
    cli.tokens["adam"] = issue_token(live_world, "adam", ["read", "write"])
    created = cli.json(
        "budget",
        "set",
        "acme",
        "--scope",
        "tenant",
        "--tokens",
        "1000",
        "--window",
        "day",
        "--thresholds",
        "50,90",
        who="adam",
    )
    assert (created["scope"], created["tokens"], created["window"]) == ("tenant", 1000, "day")
    assert created["thresholds"] == [50, 90]
    owners_raise = cli("budget", "set", "acme", "--tokens", "1500", "--window", "day")
    assert owners_raise.returncode != 0 and "budget.tenant_ceiling" in owners_raise.stderr
    changed = cli.json("budget", "set", "acme", "--tokens", "1500", "--window", "day", who="adam")
    assert changed["id"] == created["id"] and changed["tokens"] == 1500
    assert Budget.objects.filter(tenant=live_world.acme).count() == 1

    (listed,) = cli.json("budget", "list", "acme", who="bob")
    assert listed["remaining"] == 1500 and listed["resets_at"] is not None
    text = cli("budget", "list", "acme", who="bob")
    assert text.returncode == 0 and "tenant\tday\tused 0/1500\tremaining 1500" in text.stdout

    asked = cli.json(
        "budget",
        "request-raise",
        "acme",
        str(created["id"]),
        "--tokens",
        "4000",
        "--reason",
        "a launch",
    )
    assert (asked["status"], asked["duration"], asked["previous_tokens"]) == (
        "pending",
        "window",
        1500,
    )
    assert BudgetRaiseRequest.objects.get().requested_by == live_world.users["alice"]

    refused = cli(
        "budget",
        "request-raise",
        "acme",
        str(created["id"]),
        "--tokens",
        "9000",
        "--permanent",
        "--reason",
        "more",
        who="bob",
    )
    assert refused.returncode != 0 and "budget_raise.not_owner" in refused.stderr
    other = cli("budget", "list", "acme", who="charlie")
    assert other.returncode != 0 and "tenant.not_found" in other.stderr
