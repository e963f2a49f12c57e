"""In a real browser against uvicorn serving portal.asgi with the Redis channel layer: the alias's
release page moves when the controller judges the step (no reload: the tenant's events socket
tells pages.js, which reads the page again), and a maintainer pauses the plan from its buttons.
The screenshot goes to var/screenshots/ (copied to docs/img/)."""

from __future__ import annotations

import pytest
from playwright import sync_api as playwright_api

from evals.models import ReleasePlan
from tests.evals.test_release_plans import counts, start, tick, with_checks
from tests.pages.test_browser import SCREENSHOTS, chromium_page
from tests.portal.test_live_browser import _in_thread, _log_in, serve_live_portal

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PAGE = "/t/acme/aliases/support-bot/release/"


def _judged(plan_id: int, *, stable: tuple[int, int], candidate: tuple[int, int]) -> None:
    plan = ReleasePlan.objects.get(pk=plan_id)
    counts(plan, stable=stable, candidate=candidate)
    tick(plan)


def test_the_timeline_moves_live_and_a_maintainer_pauses_it(acme):
    with_checks(acme)
    plan = start(acme, steps=(5, 25, 50, 100))
    expect = playwright_api.expect
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with serve_live_portal(publisher=False) as base, chromium_page() as page:
        _log_in(page, base, "bob", PAGE)
        expect(page.get_by_test_id("step-0")).to_have_attribute("data-state", "current")
        expect(page.get_by_test_id("step-0")).to_contain_text("Not judged yet.")
        # Marked: drawn again from the server (not reloaded) when the plan moves.
        page.evaluate("document.getElementById('release-plan').dataset.stale = 'yes'")
        _in_thread(lambda: _judged(plan.pk, stable=(300, 300), candidate=(300, 299)))
        expect(page.get_by_test_id("step-1")).to_have_attribute(
            "data-state", "current", timeout=15_000
        )
        expect(page.locator("#release-plan")).not_to_have_attribute("data-stale", "yes")
        guard = page.get_by_test_id("step-0").get_by_test_id("guard-live_checks")
        expect(guard).to_contain_text("advance")
        expect(guard).to_contain_text("300 / 300")
        _in_thread(lambda: _judged(plan.pk, stable=(120, 120), candidate=(35, 35)))
        step = page.get_by_test_id("step-1")
        expect(step.get_by_test_id("guard-live_checks")).to_contain_text(
            "not enough evidence yet", timeout=15_000
        )
        expect(step.get_by_test_id("samples")).to_contain_text("candidate 35/35")
        page.screenshot(path=str(SCREENSHOTS / "release-plan.png"), full_page=True)
        actions = page.get_by_test_id("plan-actions")
        actions.locator("input[name=reason]").first.fill("watch the weekend first")
        page.get_by_test_id("plan-pause").click()
        expect(page.get_by_test_id("plan-status")).to_have_text("Paused")
        expect(page.get_by_test_id("plan-resume")).to_be_visible()
        expect(page.get_by_test_id("decisions")).to_contain_text("watch the weekend first")
