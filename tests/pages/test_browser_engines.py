"""The portal as people use it, in a real browser (Debian's Chromium via Playwright) against the
running portal (portal.asgi under uvicorn: pages, sockets and the gateway in one process), its
Celery worker and two real CPU vLLM engines: a version from upload to a streamed reply, a canary
rolled back, an operator's pin and drain. Screenshots of each main page go to var/screenshots/.

Playwright's sync API runs an event loop in the test's thread, where Django refuses synchronous
ORM calls: database work happens before a browser block starts or after it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright import sync_api as playwright_api

from adapters.access import AccessContext
from adapters.models import AdapterVersion, Alias
from adapters.services.aliases import alias_set
from tests.factories import PASSWORD, adapter_files
from tests.pages.test_browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS
from tests.workers.conftest import worker_fleet  # noqa: F401 - fixture
from tests.workers.fleet import servable_version
from workers.controller import converge_engine
from workers.desired import set_desired
from workers.models import Engine, Residency

pytestmark = [pytest.mark.browser, pytest.mark.engine, pytest.mark.django_db(transaction=True)]
expect = playwright_api.expect
SLOW_MS = 180_000  # bounds a broken run only (a validation, a cold load on a busy machine)

# Records the reply's length at every change, so a test can see tokens arrive one by one.
WATCH_REPLY = """() => {
  const reply = document.querySelector('[data-testid="pane-0-reply"]');
  window.replyLengths = [];
  new MutationObserver(() => window.replyLengths.push(reply.textContent.length))
    .observe(reply, {childList: true, characterData: true, subtree: true});
}"""


@contextmanager
def browser() -> Iterator[playwright_api.Browser]:
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def log_in(chromium, base: str, who: str, path: str) -> playwright_api.Page:
    """A fresh context (its own cookies) for `who`, signed in and on `path`."""
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{base}/login/?next={path}")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}{path}")
    return page


def shot(page: playwright_api.Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_a_version_goes_from_upload_to_a_streamed_reply(
    worker_fleet,  # noqa: F811 - fixture
    gateway_server,
    tmp_path,
):
    files = adapter_files(tmp_path / "upload", seed=31)
    base = gateway_server
    version_path = "/t/acme/a/support/v/1/"
    with browser() as chromium:
        bob = log_in(chromium, base, "bob", "/t/acme/a/support/upload/")
        shot(bob, "upload")
        bob.set_input_files("input[name=adapter_config]", str(files / "adapter_config.json"))
        bob.set_input_files("input[name=adapter_model]", str(files / "adapter_model.safetensors"))
        bob.get_by_role("button", name="Upload").click()
        bob.wait_for_url(base + version_path)
        # Validation runs on the Celery worker; the page follows it over its socket, no reload.
        bob.evaluate("() => { window.sameDocument = true; }")
        expect(bob.locator("[data-testid=status]")).to_have_text("validated", timeout=SLOW_MS)
        assert bob.evaluate("() => window.sameDocument === true")
        shot(bob, "version-validated")

        rita = log_in(chromium, base, "rita", "/review/")
        row = rita.locator("tr", has_text="acme/support v1")
        row.locator("input[name=comment]").fill("report checked")
        row.get_by_role("button", name="Approve").click()
        expect(row.locator("[data-testid=review-done]")).to_have_text("approved → staged")
        shot(rita, "review-queue")

        alice = log_in(chromium, base, "alice", version_path)
        alice.get_by_role("button", name="Release").click()
        expect(alice.locator("[data-testid=status]")).to_have_text("active", timeout=SLOW_MS)
        shot(alice, "version-active")
        for path, name in (
            ("/", "dashboard"),
            ("/t/acme/", "tenant-adapters"),
            ("/t/acme/a/support/", "adapter"),
            ("/t/acme/aliases/", "aliases"),
            ("/tokens/", "tokens"),
            ("/audit/", "audit"),
        ):
            alice.goto(base + path)
            shot(alice, name)

        bob.goto(base + "/t/acme/playground/")
        expect(bob.locator("[data-testid=socket-state]")).to_have_text("connected")
        bob.select_option("[data-testid=pick-0]", "support@1")
        bob.fill("[data-testid=prompt]", "Tell me about tea.")
        bob.fill("input[name=max_tokens]", "12")
        bob.evaluate(WATCH_REPLY)
        bob.get_by_role("button", name="Send").click()
        expect(bob.locator("[data-testid=pane-0]")).to_have_attribute(
            "data-done", "true", timeout=SLOW_MS
        )
        expect(bob.locator("[data-testid=pane-0-error]")).to_be_hidden()
        lengths = bob.evaluate("() => window.replyLengths")
        ttft = bob.locator("[data-testid=pane-0-ttft]").text_content()
        shot(bob, "playground")

    # Tokens arrived one after another: the reply grew in several steps, not all at once.
    assert len(lengths) >= 2 and lengths == sorted(lengths) and lengths[0] < lengths[-1]
    assert ttft and float(ttft) > 0
    assert AdapterVersion.objects.get(adapter=worker_fleet.world.support, number=1).status == (
        "active"
    )


def test_an_owner_rolls_back_a_canary(worker_fleet, gateway_server, tmp_path):  # noqa: F811
    world = worker_fleet.world
    servable_version(world.support, tmp_path, seed=41)
    servable_version(world.support, tmp_path, seed=42)
    access = AccessContext.for_user(world.users["alice"])
    for targets in (
        [{"version": "support@1", "weight": 100}],
        [{"version": "support@1", "weight": 90}, {"version": "support@2", "weight": 10}],
    ):
        alias_set(access=access, tenant=world.acme, name="prod", targets=targets)
    with browser() as chromium:
        alice = log_in(chromium, gateway_server, "alice", "/t/acme/aliases/")
        row = alice.locator("#alias-prod")
        expect(row.locator("[data-testid=targets]")).to_contain_text("support@2")
        shot(alice, "aliases-canary")
        row.locator("input[name=reason]").fill("canary looks slow")
        row.locator("[data-testid=rollback]").click()
        shown = alice.locator("#alias-prod [data-testid=targets]")
        expect(shown).to_contain_text("support@1 100%")
        expect(shown).not_to_contain_text("support@2")
        shot(alice, "aliases-rolled-back")

    alias = Alias.objects.get(tenant=world.acme, name="prod")
    assert [(t.version.number, t.weight) for t in alias.targets.all()] == [(1, 100)]


def test_an_operator_pins_and_drains(worker_fleet, gateway_server, tmp_path):  # noqa: F811
    world = worker_fleet.world
    version = servable_version(world.support, tmp_path, seed=51)
    set_desired(
        version=version, engine=worker_fleet.a, state="registered", reason="t", converge=False
    )
    converge_engine(worker_fleet.a)
    with browser() as chromium:
        olga = log_in(chromium, gateway_server, "olga", "/fleet/engines/")
        shot(olga, "fleet-engines")
        olga.goto(f"{gateway_server}/fleet/engines/{worker_fleet.a.name}/")
        row = olga.locator('tr.residency-row[data-version="acme/support@1"]')
        row.get_by_role("button", name="Pin").click()
        expect(
            olga.locator('tr.residency-row[data-version="acme/support@1"] [data-testid=desired]')
        ).to_have_text("pinned", timeout=SLOW_MS)
        shot(olga, "engine-pinned")
        olga.get_by_role("button", name="Drain").click()
        expect(olga.locator("[data-testid=engine-state]")).to_have_text("draining")
        shot(olga, "engine-draining")

    assert Residency.objects.get(engine=worker_fleet.a, version=version).desired_state == "pinned"
    assert Engine.objects.get(pk=worker_fleet.a.pk).state == "draining"
