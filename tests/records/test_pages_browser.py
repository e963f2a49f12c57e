"""In a real browser: the compliance record page and the fleet's cost page, reached from the
version page and the platform pages, with screenshots (var/screenshots/, copied to docs/img/).

Database work happens before the browser starts (Playwright's sync API runs an event loop in
this thread, where Django refuses synchronous ORM calls)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright import sync_api as playwright_api

from adapters.models import Adapter
from gateway.models import CostSettings, DailyUsage
from portal.audit_checkpoint import write_checkpoint
from tests.gateway.recording import engine_row, version
from tests.pages.test_browser import SCREENSHOTS, _log_in, chromium_page
from workers.models import EngineUptime

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _fleet_week(world) -> tuple[str, str]:
    """A week of a small fleet: two shared engines all week, a gold one for three days; two busy
    adapters and 30 quiet ones with traffic every day; 2.50 USD an engine-hour."""
    now = timezone.now()
    week_ago = now - timedelta(days=6)
    for name, pool, start in (
        ("shared-1", "shared", week_ago - timedelta(days=1)),
        ("shared-2", "shared", week_ago - timedelta(days=1)),
        ("gold-1", "gold", now - timedelta(days=3)),
    ):
        engine = engine_row(world, name, pool)
        EngineUptime.objects.create(engine=engine, pool=pool, started_at=start, last_seen_at=now)
    legal = version(world.legal, 1)
    support = world.support.versions.get(number=3)
    # The long tail the shared engines exist for: 30 adapters with a little traffic each.
    tail = [
        (
            version(Adapter.objects.create(tenant=t, name=f"tail-{i}", base_model=world.base), 1),
            t,
            40,
        )
        for i, t in enumerate([world.acme, world.globex] * 15)
    ]
    for back in range(7):
        day = (now - timedelta(days=back)).date()
        for v, tenant, requests in (
            (support, world.acme, 4200),
            (legal, world.globex, 1300),
            *tail,
        ):
            DailyUsage.objects.update_or_create(
                tenant=tenant,
                version=v,
                day=day,
                defaults={
                    "requests": requests,
                    "prompt_tokens": requests * 180,
                    "completion_tokens": requests * 95,
                    "slot_seconds": requests * 1.7,
                },
            )
    CostSettings.objects.update_or_create(
        pk=1, defaults={"price_per_engine_hour": Decimal("2.50"), "updated_by": world.users["adam"]}
    )
    write_checkpoint()  # what beat does every AUDIT_CHECKPOINT_SECONDS
    return week_ago.date().isoformat(), now.date().isoformat()


def test_the_record_and_the_cost_pages(history, live_server):
    world = history.world
    day_from, day_to = _fleet_week(world)
    base = live_server.url
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    expect = playwright_api.expect
    with chromium_page() as page:
        _log_in(page, base, "adam", "/t/acme/a/support/v/3/")
        page.get_by_test_id("evidence-link").click()
        expect(page.get_by_test_id("evidence")).to_contain_text("support@3")
        expect(page.get_by_test_id("evidence-requests")).to_have_text("29400")
        expect(page.get_by_test_id("key-fingerprint")).to_contain_text("sha256:")
        expect(page.get_by_test_id("evidence-decisions")).to_contain_text("looks fine")
        expect(page.get_by_test_id("evidence-checkpoint")).to_contain_text("#")
        page.screenshot(path=str(SCREENSHOTS / "evidence-record.png"), full_page=True)

        page.goto(f"{base}/platform/")
        page.get_by_role("link", name="Cost").first.click()
        page.goto(f"{page.url}?from={day_from}&to={day_to}")
        expect(page.get_by_test_id("cost-pools")).to_contain_text("shared")
        expect(page.get_by_test_id("dedicated-hours")).to_be_visible()
        expect(page.get_by_test_id("cost-tenants")).to_contain_text("globex")
        page.screenshot(path=str(SCREENSHOTS / "cost-fleet.png"), full_page=True)
