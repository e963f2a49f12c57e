"""The release plans' API under an alias: start, read with each step's guards, act, and the
refusals (bad input leaves nothing; another alias's or tenant's plan is not found)."""

from __future__ import annotations

import pytest

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from evals.models import ReleasePlan, ReleaseStep
from evals.services import release_controller
from tests.evals.test_release_plans import with_checks

URL = "/api/v1/tenants/acme/aliases/support-bot/releases/"


@pytest.mark.django_db
def test_it_starts_a_plan_and_shows_each_steps_guards(acme):
    with_checks(acme)
    client = acme.client("alice")
    created = client.post(
        URL,
        {
            "candidate": "support@2",
            "steps": [5, 25, 100],
            "min_step_samples": 20,
            "min_step_seconds": 0,
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["stable"], body["candidate"], body["status"]) == (
        "support@1",
        "support@2",
        "running",
    )
    assert [s["weight"] for s in body["step_rows"]] == [5, 25, 100]
    plan = ReleasePlan.objects.get()
    ReleaseStep.objects.filter(plan=plan, index=0).update(
        stable_n=400, stable_passed=400, candidate_n=300, candidate_passed=300
    )
    result = release_controller.plan_tick(plan.pk, client=None, now=0)
    assert result.decision == "advance", result
    shown = client.get(f"{URL}{plan.pk}/").json()
    step = shown["step_rows"][1]  # it advanced: step 0's figures are kept on it
    assert shown["current_step"] == 1 and step["weight"] == 25
    first = shown["step_rows"][0]
    assert first["samples"] == {
        "stable": {"n": 400, "passed": 400},
        "candidate": {"n": 300, "passed": 300},
    }
    guard = first["guards"]["live_checks"]
    assert guard["decision"] == "advance" and guard["interval"][0] > -0.05
    assert shown["decisions"][0]["action"] == "advance"
    assert shown["decisions"][0]["actor"] == "release-controller"
    listed = client.get(URL).json()
    assert [p["id"] for p in listed["results"]] == [plan.pk]


@pytest.mark.django_db
def test_bad_input_is_refused_with_its_code_and_leaves_nothing(acme):
    client = acme.client("alice")
    for body, code in (
        ({"candidate": "support@2", "steps": [0, 10, 100]}, "release.shadow_needs_judge"),
        ({"candidate": "support@2", "steps": [10, 0, 100]}, "release.shadow_not_first"),
        ({"candidate": "support@2", "steps": [10, 50]}, "release.bad_steps"),
        ({"candidate": "support@9", "steps": [10, 100]}, "alias.unknown_version"),
    ):
        response = client.post(URL, body, format="json")
        assert response.status_code in (400, 404), response.json()
        assert response.json()["error"]["code"] == code
    assert not ReleasePlan.objects.exists()


@pytest.mark.django_db
def test_another_aliass_plan_and_another_tenants_alias_are_not_found(acme):
    alice = AccessContext.for_user(acme.users["alice"])
    alias_set(
        access=alice,
        tenant=acme.acme,
        name="other-bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    client = acme.client("alice")
    plan = client.post(URL, {"candidate": "support@2", "steps": [10, 100]}, format="json").json()
    other = client.get(f"/api/v1/tenants/acme/aliases/other-bot/releases/{plan['id']}/")
    assert other.status_code == 404
    assert other.json()["error"]["code"] == "release.not_found"
    charlie = acme.client("charlie")
    assert charlie.get(f"{URL}{plan['id']}/").status_code == 404
    paused = client.post(f"{URL}{plan['id']}/pause/", {"reason": "x"}, format="json")
    assert paused.json()["status"] == "paused"
    missing = client.get("/api/v1/tenants/acme/aliases/nope/releases/")
    assert missing.json()["error"]["code"] == "alias.not_found"
