"""In a real browser: sign in through the provider's own page, land with the mapped memberships,
lose one when its group is removed at the provider, lose all access when disabled there.

The ORM is used before and after the browser only (Playwright's loop runs in this thread); the
provider is driven over HTTP meanwhile.
"""

from __future__ import annotations

import time

import pytest
from playwright import sync_api as playwright_api

from tenants.models import Membership
from tenants.sso.models import SsoMapping
from tests.fixtures.oidc_provider import PASSWORD
from tests.pages.test_browser import SCREENSHOTS, chromium_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# How long a disabled person may keep a session here (SSO_RECHECK_SECONDS), and a bound on the
# wait for it, which only a broken re-check reaches.
RECHECK_SECONDS = 2
DEADLINE_SECONDS = 30


def _nav_tenants(page) -> set[str]:
    links = page.locator("header nav a").all_inner_texts()
    return {text for text in links if text in ("acme", "globex")}


def _sign_in_with_provider(page, base: str, *, at_provider: bool) -> None:
    page.goto(f"{base}/login/")
    page.get_by_test_id("sso-testidp").click()
    if at_provider:  # the provider's own page (later sign-ins ride its session)
        page.wait_for_selector("#idp-username")
        page.fill("#idp-username", "kim")
        page.fill("#idp-password", PASSWORD)
        page.click("#idp-submit")
    page.wait_for_url(f"{base}/")


def test_sign_in_through_the_provider_then_lose_a_group_then_everything(
    live_server, world, sso, settings
):
    expect = playwright_api.expect
    settings.SSO_RECHECK_SECONDS = RECHECK_SECONDS
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-team", tenant=world.acme, role="maintainer"
    )
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="globex-read", tenant=world.globex, role="viewer"
    )
    sso.user("kim", groups=["ml-team", "globex-read"])
    # The provider's redirect URIs are on 127.0.0.1 (any port, RFC 8252).
    base = live_server.url.replace("localhost", "127.0.0.1")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with chromium_page() as page:
        _sign_in_with_provider(page, base, at_provider=True)
        assert _nav_tenants(page) == {"acme", "globex"}
        page.screenshot(path=str(SCREENSHOTS / "sso-signed-in.png"), full_page=True)

        sso.user("kim", groups=["ml-team"])  # removed from a group at the provider
        page.get_by_role("button", name="Log out kim").click()
        _sign_in_with_provider(page, base, at_provider=False)
        assert _nav_tenants(page) == {"acme"}
        expect(page.get_by_text("Log out kim")).to_be_visible()

        sso.user("kim", groups=["ml-team"], active=False)  # disabled at the provider
        deadline = time.monotonic() + DEADLINE_SECONDS
        while "/login/" not in page.url and time.monotonic() < deadline:
            page.wait_for_timeout(250)  # poll the condition: the next page view re-checks
            page.goto(f"{base}/")
        assert "/login/" in page.url
        expect(page.locator("ul.messages")).to_contain_text("single sign-on session has ended")
        page.screenshot(path=str(SCREENSHOTS / "sso-session-ended.png"), full_page=True)
    assert not Membership.objects.filter(user__username="kim").exists()
