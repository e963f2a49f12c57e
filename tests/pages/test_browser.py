"""In a real browser (Debian's Chromium via Playwright): the review queue and the upload form.

Database reads and writes happen before the browser starts or after it stops: Playwright's sync
API runs an event loop in this thread, where Django refuses synchronous ORM calls.
"""

from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from playwright import sync_api as playwright_api

from adapters.models import AdapterVersion
from tests.factories import PASSWORD, adapter_files

# The world's personas recreate the platform-role groups a transactional flush empties
# (tests/factories.make_user), so no serialized rollback is needed; it would clash with the
# content types that the flush's post_migrate recreates.
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
RECORD_PROGRESS = """() => document.querySelector("form[data-upload-progress]").addEventListener(
    "upload:progress", (e) => sessionStorage.setItem("upload-progress", String(e.detail)))"""
SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"


@contextmanager
def chromium_page():
    """A page in headless Chromium; the ORM works again once this block has ended."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing; run scripts/ensure_browser.sh as root")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 900})
        finally:
            browser.close()


def _log_in(page, base, who, next_path):
    page.goto(f"{base}/login/?next={next_path}")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}{next_path}")


def test_a_reviewer_approves_from_the_queue(live_server, live_pages):
    expect = playwright_api.expect
    version = live_pages.validated
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with chromium_page() as page:
        _log_in(page, live_server.url, "rita", "/review/")
        row = page.locator(f"#review-{version.pk}")
        expect(row).to_contain_text("acme/support v1")
        expect(page.locator(f"#review-{live_pages.foreign.pk}")).to_contain_text("globex/legal v1")
        page.screenshot(path=str(SCREENSHOTS / "review-queue.png"), full_page=True)
        row.locator("input[name=comment]").fill("checked the report")
        row.get_by_role("button", name="Approve").click()
        # HTMX swaps the row in place: the page does not reload.
        expect(page.locator(f"#review-{version.pk} [data-testid=review-done]")).to_have_text(
            "approved → staged"
        )
        expect(page.locator(f"#review-{live_pages.foreign.pk}")).to_contain_text("Approve")
        page.screenshot(path=str(SCREENSHOTS / "review-queue-approved.png"), full_page=True)

    assert AdapterVersion.objects.get(pk=version.pk).status == "staged"


def test_a_reviewer_sees_a_refused_rejection_in_the_row(live_server, live_pages):
    expect = playwright_api.expect
    version = live_pages.validated
    with chromium_page() as page:
        _log_in(page, live_server.url, "rita", "/review/")
        page.locator(f"#review-{version.pk}").get_by_role("button", name="Reject").click()
        expect(page.locator(f"#review-{version.pk} .error-box")).to_contain_text(
            "rejection.reason_required"
        )

    assert AdapterVersion.objects.get(pk=version.pk).status == "validated"


def test_the_upload_form_reports_progress_and_follows_to_the_version(
    live_server, live_pages, tmp_path
):
    expect = playwright_api.expect
    files = adapter_files(tmp_path / "browser-upload", seed=21)
    before = AdapterVersion.objects.filter(adapter=live_pages.world.support).count()
    with chromium_page() as page:
        _log_in(page, live_server.url, "bob", "/t/acme/a/support/upload/")
        page.set_input_files("input[name=adapter_config]", str(files / "adapter_config.json"))
        page.set_input_files("input[name=adapter_model]", str(files / "adapter_model.safetensors"))
        # sessionStorage outlives the navigation that follows a successful upload.
        page.evaluate(RECORD_PROGRESS)
        with page.expect_response(lambda r: r.request.method == "POST") as sent:
            page.get_by_role("button", name="Upload").click()
        assert sent.value.request.resource_type == "xhr"  # upload.js sent it, not a plain submit
        page.wait_for_url(f"{live_server.url}/t/acme/a/support/v/{before + 1}/")
        expect(page.locator("[data-testid=status]")).to_have_text("uploaded")
        assert page.evaluate("() => sessionStorage.getItem('upload-progress')") == "100"

    assert AdapterVersion.objects.filter(adapter=live_pages.world.support).count() == before + 1


def test_the_upload_form_shows_a_refusal_without_leaving_the_page(
    live_server, live_pages, tmp_path
):
    expect = playwright_api.expect
    files = adapter_files(tmp_path / "browser-upload", seed=22)
    live_pages.world.acme.quota_storage_bytes = 1000
    live_pages.world.acme.save()
    count = AdapterVersion.objects.count()
    url = f"{live_server.url}/t/acme/a/support/upload/"
    with chromium_page() as page:
        _log_in(page, live_server.url, "bob", "/t/acme/a/support/upload/")
        page.set_input_files("input[name=adapter_config]", str(files / "adapter_config.json"))
        page.set_input_files("input[name=adapter_model]", str(files / "adapter_model.safetensors"))
        page.get_by_role("button", name="Upload").click()
        expect(page.locator("#upload-errors")).to_contain_text("quota.storage")
        expect(page.get_by_role("button", name="Upload")).to_be_enabled()
        assert page.url == url
        page.screenshot(path=str(SCREENSHOTS / "upload-refused.png"), full_page=True)

    assert AdapterVersion.objects.count() == count
