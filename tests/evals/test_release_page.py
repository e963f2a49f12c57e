"""The alias's releases page: each plan as a timeline of its steps with their samples and guard
figures and its decisions; it reloads itself while a plan is open (an htmx request gets the
timeline alone); another tenant's alias is not found."""

from __future__ import annotations

import pytest

from tests.evals.test_release_plans import counts, start, tick, with_checks

URL = "/t/acme/aliases/support-bot/releases/"


@pytest.mark.django_db
def test_it_shows_the_steps_guards_and_decisions_and_polls_while_open(acme):
    with_checks(acme)
    plan = start(acme)
    counts(plan, stable=(12, 12), candidate=(12, 12))
    tick(plan)  # holds: the guard's figures are on the step
    page = acme.client("vera").get(URL).content.decode()
    assert 'data-testid="plan-status">running' in page
    assert "samples: stable 12/12, candidate 12/12" in page
    assert "live_checks" in page and "hold" in page
    assert 'hx-trigger="every 5s"' in page  # open: the timeline reloads itself
    partial = acme.client("vera").get(URL, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in partial and 'data-testid="release-plan"' in partial

    counts(plan, stable=(30, 30), candidate=(30, 0))
    tick(plan)
    page = acme.client("vera").get(URL).content.decode()
    assert 'data-testid="plan-status">rolled_back' in page
    assert "<strong>rollback</strong> by release-controller" in page
    assert 'hx-trigger="every 5s"' not in page  # ended: nothing more to follow


@pytest.mark.django_db
def test_another_tenants_alias_and_an_unknown_alias_are_not_found(acme):
    assert acme.client("charlie").get(URL).status_code == 404
    assert acme.client("alice").get("/t/acme/aliases/nope/releases/").status_code == 404
    empty = acme.client("alice").get(URL).content.decode()
    assert "No release plan on this alias yet." in empty
