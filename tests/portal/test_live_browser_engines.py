"""In a real browser, with real engines: requests through the gateway move the version page's
charts. The whole path is real: the gateway's request path and Recorder, its Redis series, the
publisher process, the Redis channel layer, the metrics socket, uPlot in Chromium."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from django.urls import reverse
from playwright import sync_api as playwright_api

from adapters.access import AccessContext
from adapters.models import Adapter
from tenants.services.tokens import token_issue
from tests.fixtures.celery_worker import _service_env, _stop
from tests.pages.test_browser import SCREENSHOTS, chromium_page
from tests.portal.test_live_browser import _log_in, _spawn
from tests.workers.fleet import servable_version

pytestmark = [pytest.mark.engine, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
REQUESTS = 3


@pytest.fixture
def live_publisher(celery_worker_process) -> Iterator[None]:
    """The publisher on the same Redis as the session's gateway (tests/fixtures/gateway.py)."""
    proc = _spawn(
        ["manage.py", "publish_live_metrics"],
        _service_env(celery_worker_process["queue"]),
        "live-publisher",
    )
    try:
        yield
    finally:
        _stop(proc)


def test_requests_through_the_gateway_move_the_version_charts(
    worker_fleet, gateway_server, live_publisher, tmp_path
):
    world = worker_fleet.world
    name = f"live-{uuid.uuid4().hex[:6]}"  # a series no other test writes
    adapter = Adapter.objects.create(
        tenant=world.acme, name=name, base_model=world.base, created_by=world.users["alice"]
    )
    version = servable_version(adapter, tmp_path, seed=401)
    token = token_issue(
        access=AccessContext.for_user(world.users["alice"]), scopes=["inference"], tenant=world.acme
    )
    path = reverse("version-detail", args=["acme", name, version.number])
    expect = playwright_api.expect
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with chromium_page() as page:
        _log_in(page, gateway_server, "alice", path)
        charts = page.locator("[data-testid=live-charts-version]")
        expect(charts.locator("[data-live-state]")).to_have_text("live", timeout=20_000)
        expect(charts).to_have_attribute("data-requests-shown", "0", timeout=20_000)
        with httpx.Client(
            base_url=gateway_server, headers={"Authorization": f"Bearer {token.plaintext}"}
        ) as client:
            for _ in range(REQUESTS):
                reply = client.post(
                    "/v1/chat/completions",
                    json={
                        "model": name,
                        "messages": [{"role": "user", "content": "Say something about tea."}],
                        "max_tokens": 4,
                    },
                    timeout=180,
                )
                assert reply.status_code == 200, reply.text
        expect(charts).to_have_attribute("data-requests-shown", str(REQUESTS), timeout=20_000)
        time.sleep(1.5)  # one more tick, so the screenshot shows the last second too
        page.screenshot(path=str(SCREENSHOTS / "version-live-engine.png"), full_page=True)
