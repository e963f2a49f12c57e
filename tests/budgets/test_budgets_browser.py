"""The budgets page in Chromium: burn-down charts drawn, numbers with their money (a price card on
the base model), alerts and a pending raise; its screenshot (var/screenshots/budgets.png, copied to
docs/img/)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from playwright import sync_api as playwright_api

from adapters.access import AccessContext
from adapters.models import Alias, AliasTarget
from budgets import clock
from budgets.alerts import send_budget_alerts
from budgets.models import Budget, BudgetSample, PriceCard
from budgets.raises import raise_request_create
from budgets.selectors import budget_span
from tests.budgets.spending import clear_budget_counts, spend
from tests.factories import build_world
from tests.pages.test_browser import SCREENSHOTS, _log_in, chromium_page
from tests.workers.fleet import servable_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _history(budget: Budget, rate_per_hour: int) -> int:
    """Samples every two hours since the window began at `rate_per_hour`, a busier afternoon
    each day; the settled spend at the end."""
    now = clock.now()
    span = budget_span(budget, now)
    at, used = span.start, 0
    while at < now:
        busy = 3 if 13 <= at.hour < 18 else 1
        used += rate_per_hour * 2 * busy
        BudgetSample.objects.create(
            budget=budget, window_start=span.start, at=at, used=used, limit=budget.tokens
        )
        at += timedelta(hours=2)
    spend(budget, used, now)
    return used


def test_the_budgets_page_draws_each_budgets_burn_down(live_server, settings, tmp_path):
    settings.ADAPTER_STORAGE_BACKEND, settings.ADAPTER_STORAGE_ROOT = "local", str(tmp_path)
    clear_budget_counts()
    world = build_world()
    world.acme.time_zone = "Europe/Paris"
    world.acme.save()
    # What a million weighted tokens of the base model cost: both budgets show money beside tokens.
    PriceCard.objects.create(
        base_model=world.base,
        price_per_million=Decimal("8"),
        completion_weight=Decimal("3"),
        currency="EUR",
    )
    support_bot = Alias.objects.create(tenant=world.acme, name="support-bot")
    AliasTarget.objects.create(
        alias=support_bot, version=servable_version(world.support, tmp_path, seed=1), weight=100
    )
    tenant = Budget.objects.create(
        tenant=world.acme,
        scope="tenant",
        tokens=2_000_000,
        window="month",
        thresholds=[25, 50, 80, 100],
    )
    alias = Budget.objects.create(
        tenant=world.acme, scope="alias:support-bot", tokens=400_000, window="month"
    )
    _history(tenant, 2_400)
    _history(alias, 1_900)
    send_budget_alerts()
    raise_request_create(
        access=AccessContext.for_user(world.users["alice"]),
        budget=alias,
        tokens=600_000,
        duration="window",
        reason="support-bot launch: twice the traffic until the end of the month",
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    expect = playwright_api.expect
    with chromium_page() as page:
        _log_in(page, live_server.url, "alice", "/t/acme/budgets/")
        card = page.get_by_test_id(f"budget-{alias.id}")
        expect(card.get_by_test_id("money")).to_contain_text("EUR of 3.20 EUR")
        expect(page.get_by_test_id(f"budget-{tenant.id}").get_by_test_id("money")).to_contain_text(
            "EUR of 16.00 EUR"
        )
        expect(card.get_by_test_id("alerts")).to_contain_text("50%")
        expect(card.get_by_test_id("raises")).to_contain_text("pending")
        expect(card.locator(".burn-down canvas")).to_have_count(1)
        expect(page.locator(".burn-down canvas")).to_have_count(2)
        page.screenshot(path=str(SCREENSHOTS / "budgets.png"), full_page=True)
