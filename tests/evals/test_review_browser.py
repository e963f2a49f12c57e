"""In a real browser: the review queue with a gated version, then the reviewer's version page
with an eval run that fails a must-pass case: the gate's criteria, the regression first in the
side-by-side, the tag filter, the override.
Screenshots go to var/screenshots/ (copied to docs/img/)."""

from __future__ import annotations

import pytest
from playwright import sync_api as playwright_api

from tests.evals.runs import finished_run
from tests.evals.test_gate import MUST_PASS_FAILS
from tests.pages.test_browser import SCREENSHOTS, _log_in, chromium_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PAGE = "/t/acme/a/support/v/1/"


def test_the_reviewer_reads_the_run_side_by_side_and_overrides(world, gated, live_server):
    version, suite = gated
    finished_run(version, suite, MUST_PASS_FAILS)
    world.client("rita").post("/api/v1/tenants/acme/adapters/support/versions/1/approve/", {})
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    expect = playwright_api.expect
    with chromium_page() as page:
        # The queue first: the gated version's row says where its gate stands.
        _log_in(page, live_server.url, "rob", "/review/")
        row = page.locator("#review-" + str(version.pk))
        expect(row.get_by_test_id("queue-note")).to_contain_text("Eval gate: run 1 failed")
        page.screenshot(path=str(SCREENSHOTS / "eval-review-queue.png"), full_page=True)
        page.goto(f"{live_server.url}{PAGE}")
        gate = page.get_by_test_id("eval-gate")
        expect(page.get_by_test_id("eval-verdict")).to_have_text("The gate refuses approval.")
        expect(page.get_by_test_id("eval-criteria")).to_contain_text(
            "must-pass cases failed: refund"
        )
        rows = page.get_by_test_id("eval-cases").locator("tbody tr")
        expect(rows.first).to_contain_text("regressed")
        expect(rows.first).to_contain_text("whenever you like")
        gate.screenshot(path=str(SCREENSHOTS / "eval-review.png"))
        page.select_option("select[name=tag]", "smoke")
        page.wait_for_url(f"{live_server.url}{PAGE}?tag=smoke")
        expect(page.get_by_test_id("eval-cases").locator("tbody tr")).to_have_count(1)
        form = page.get_by_test_id("override-form")
        form.locator("input[name=reason]").fill("refund wording changed on purpose")
        form.locator("button").click()
        page.wait_for_url(f"{live_server.url}/review/")  # approved from the queue's flow
        page.goto(f"{live_server.url}{PAGE}")
        expect(page.get_by_test_id("gate-override")).to_contain_text("Eval gate overridden by rob")
        page.get_by_test_id("gate-override").scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / "eval-override.png"), full_page=True)
