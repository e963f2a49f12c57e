"""In a real browser (Debian's Chromium via Playwright) against a real uvicorn serving portal.asgi
with the Redis channel layer and the real publisher process: the version page's status moves to
`validated` without a reload, and its charts change after requests are recorded; the operators'
dashboard draws the fleet. Screenshots go to var/screenshots/.

Requests here are recorded by the gateway's own Recorder (the same writes a served request makes);
the engine variant of "chart changes after requests" belongs with the engine browser tests."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.urls import reverse
from playwright import sync_api as playwright_api

from tests.factories import PASSWORD
from tests.fixtures.celery_worker import REPO, _service_env, _stop
from tests.fixtures.gateway import _free_port
from tests.pages.builders import upload_files
from tests.pages.test_browser import SCREENSHOTS, chromium_page
from tests.paths import TEST_VAR
from tests.portal.test_live_metrics import measurement

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _spawn(args: list[str], env: dict[str, str], name: str) -> subprocess.Popen:
    log = TEST_VAR / f"{name}-{uuid.uuid4().hex[:6]}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@contextmanager
def serve_live_portal(*, publisher: bool) -> Iterator[str]:
    """uvicorn with portal.asgi on the test database, and (if asked) the live metrics publisher
    beside it; the base URL."""
    port = _free_port()
    env = _service_env(f"live-{uuid.uuid4().hex[:6]}")
    web = _spawn(
        [
            "-m",
            "uvicorn",
            "portal.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "off",
            "--no-access-log",
        ],
        env,
        "live-web",
    )
    beside = (
        _spawn(["manage.py", "publish_live_metrics"], env, "live-publisher") if publisher else None
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(base + "/login/", timeout=1)  # noqa: S310
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.2)
        yield base
    finally:
        if beside is not None:
            _stop(beside)
        _stop(web)


@pytest.fixture
def live_portal(transactional_db) -> Iterator[str]:
    """uvicorn with portal.asgi on the test database, and the live metrics publisher beside it."""
    with serve_live_portal(publisher=True) as base:
        yield base


def _log_in(page, base: str, who: str, next_path: str) -> None:
    page.goto(f"{base}/login/?next={next_path}")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}{next_path}")


def _in_thread(fn) -> None:
    """The ORM refuses to run in Playwright's event-loop thread; run `fn` beside it."""
    errors: list[BaseException] = []

    def go():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
        finally:
            from django.db import connection

            connection.close()  # this thread's own connection, or the test database lingers

    thread = threading.Thread(target=go)
    thread.start()
    thread.join(60)
    if errors:
        raise errors[0]


def _record(*measurements) -> None:
    from django.conf import settings
    from redis import asyncio as aioredis

    from gateway.recorder import Recorder

    async def go():
        redis = aioredis.Redis.from_url(settings.REDIS_URL)
        recorder = Recorder(redis)
        for m in measurements:
            recorder.add(m)
        await recorder.flush()
        await redis.aclose()

    _in_thread(lambda: asyncio.run(go()))


def test_a_version_page_goes_live(world, tmp_path, monkeypatch, live_portal):
    from adapters.models import Adapter
    from adapters.services.validation import run_validation
    from tests.factories import adapter_files

    monkeypatch.setattr("adapters.services.uploads._enqueue_validation", lambda version_id: None)
    name = f"live-{uuid.uuid4().hex[:6]}"  # series nobody else records
    adapter = Adapter.objects.create(
        tenant=world.acme, name=name, base_model=world.base, created_by=world.users["alice"]
    )
    version = upload_files(world, "bob", adapter, adapter_files(tmp_path / "a"))
    assert version.status == "uploaded"
    expect = playwright_api.expect
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = reverse("version-detail", args=["acme", name, version.number])
    with chromium_page() as page:
        _log_in(page, live_portal, "vera", path)
        charts = page.locator("[data-testid=live-charts-version]")
        expect(charts.locator("[data-live-state]")).to_have_text("live", timeout=15_000)
        expect(charts).to_have_attribute("data-requests-shown", "0", timeout=15_000)
        status = page.get_by_test_id("status")
        expect(status).to_have_text("uploaded")

        # Parts marked data-refresh-on-status that changed are drawn again: mark one to see it
        # replaced (the validation report: a viewer's actions do not change).
        page.evaluate("document.getElementById('validation-report').dataset.stale = 'yes'")
        _in_thread(lambda: run_validation(version_id=version.pk))
        expect(status).to_have_text("validated", timeout=15_000)
        expect(status).to_have_class("state-validated")
        expect(page.locator("#validation-report")).not_to_have_attribute(
            "data-stale", "yes", timeout=15_000
        )

        now = time.time()
        _record(
            measurement("acme", f"{name}@1", at=now, served_from="cold", load_ms=120.0),
            measurement("acme", f"{name}@1", at=now, served_from="gpu", ttft_ms=9.0),
            measurement("acme", f"{name}@1", at=now, served_from="gpu", ok=False),
        )
        expect(charts).to_have_attribute("data-requests-shown", "3", timeout=15_000)
        assert page.locator("[data-testid=live-charts-version] canvas").count() >= 8
        page.screenshot(path=str(SCREENSHOTS / "version-live.png"), full_page=True)


def test_the_dashboard_draws_the_fleet_for_an_operator(world, live_portal):
    expect = playwright_api.expect
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with chromium_page() as page:
        _log_in(page, live_portal, "olga", "/")
        charts = page.locator("[data-testid=live-charts-fleet]")
        expect(charts.locator("[data-live-state]")).to_have_text("live", timeout=15_000)
        # The count is of the last 120 seconds of the whole fleet: other tests' requests in it
        # slide out while ours comes in, so "more than before" can miss ours. Record more than
        # were shown: only our second reaching the page brings the count that high.
        before = int(charts.get_attribute("data-requests-shown") or 0)
        ours = before + 200
        at = time.time()
        _record(
            *(
                measurement("globex", "legal@1", at=at, served_from="cold", load_ms=50.0)
                for _ in range(ours)
            )
        )
        page.wait_for_function(
            "(n) => +document.querySelector('[data-testid=live-charts-fleet]')"
            ".dataset.requestsShown >= n",
            arg=ours,
            timeout=15_000,
        )
        page.screenshot(path=str(SCREENSHOTS / "dashboard-live.png"), full_page=True)
