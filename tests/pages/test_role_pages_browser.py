"""Every role's main pages in Chromium at laptop and phone width: they render, nothing pushes the
page wider than the screen (wide tables scroll inside their card), and a screenshot of each is
saved under var/screenshots/ (a test artifact)."""

import pytest
from playwright import sync_api as playwright_api

from tests.pages.routes import _fleet_engine
from tests.pages.test_browser import SCREENSHOTS, _log_in, chromium_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
OVERFLOW = "() => document.documentElement.scrollWidth - window.innerWidth"


def _pages_of(version):
    v = f"/t/acme/a/support/v/{version}/"
    return {
        "alice": [
            "/",
            "/t/acme/",
            "/t/acme/a/support/",
            v,
            "/t/acme/aliases/",
            "/t/acme/members/",
            "/t/acme/keys/",
            "/t/acme/usage/",
            "/tokens/",
            "/audit/",
        ],
        "olga": [
            "/",
            "/fleet/engines/",
            "/fleet/engines/pages-1/",
            "/fleet/pools/",
            "/fleet/residency/",
            "/fleet/schedules/",
            "/fleet/alarms/",
            "/fleet/advice/",
        ],
        "adam": [
            "/platform/",
            "/platform/tenants/acme/",
            "/platform/users/",
            "/platform/base-models/",
            "/platform/usage/",
        ],
        "rita": ["/review/"],
    }


def _shot_name(who, path, width):
    slug = path.strip("/").replace("/", "-") or "dashboard"
    return SCREENSHOTS / f"roles-{who}-{slug}-{width}.png"


@pytest.mark.parametrize("who", ["alice", "olga", "adam", "rita"])
def test_each_roles_pages_fit_a_laptop_and_a_phone(live_server, live_pages, who):
    _fleet_engine(live_pages)
    paths = _pages_of(live_pages.active.number)[who]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    too_wide = {}
    with chromium_page() as page:
        _log_in(page, live_server.url, who, paths[0])
        for viewport in (LAPTOP, PHONE):
            page.set_viewport_size(viewport)
            for path in paths:
                response = page.goto(live_server.url + path)
                assert response is not None and response.status == 200, path
                playwright_api.expect(page.locator("main h1")).to_be_visible()
                extra = page.evaluate(OVERFLOW)
                if extra > 1:
                    too_wide[f"{path} @{viewport['width']}"] = extra
                page.screenshot(path=str(_shot_name(who, path, viewport["width"])), full_page=True)
    assert too_wide == {}, "pages wider than the screen (px too wide)"
