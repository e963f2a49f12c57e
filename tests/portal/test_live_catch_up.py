"""Live pages never miss a change: what happens after a page was drawn but before its socket
joined shows once the socket opens, for every live part (the version's status and the parts that
follow it, the charts, the playground's picker). In a real browser against a real uvicorn.

The page's sockets are held back by the test (GATE: the page's WebSocket opens only when the
test says so), the change is made meanwhile, then the sockets may open: no race decides the
outcome. No metrics publisher runs here, so a chart's second can only come from the socket's
catch-up on join, never from the publisher's regular resend.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from django.urls import reverse
from playwright import sync_api as playwright_api

from tests.pages.builders import upload_files
from tests.pages.test_browser import chromium_page
from tests.portal.test_live_browser import _in_thread, _log_in, _record, serve_live_portal
from tests.portal.test_live_metrics import measurement

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
expect = playwright_api.expect

# Every WebSocket the page makes waits for `window.openSockets()`; until then it is CONNECTING,
# as a socket still on its way is. Events and properties the pages use are passed through.
GATE = """(() => {
  const Real = window.WebSocket;
  let open;
  const gate = new Promise((resolve) => { open = resolve; });
  window.openSockets = () => open();
  class GatedSocket extends EventTarget {
    constructor(url, protocols) {
      super();
      this.readyState = Real.CONNECTING;
      gate.then(() => {
        const real = new Real(url, protocols);
        this.real = real;
        const pass = (e) => {
          this.readyState = real.readyState;
          if (e.type === "message") return new MessageEvent("message", { data: e.data });
          if (e.type === "close") return new CloseEvent("close", { code: e.code, reason: e.reason });
          return new Event(e.type);
        };
        ["open", "message", "close", "error"].forEach((type) =>
          real.addEventListener(type, (e) => this.dispatchEvent(pass(e))));
      });
    }
    send(data) { this.real.send(data); }
    close(code, reason) { if (this.real) this.real.close(code, reason); }
  }
  ["CONNECTING", "OPEN", "CLOSING", "CLOSED"].forEach((k) => { GatedSocket[k] = Real[k]; });
  window.WebSocket = GatedSocket;
})();"""


@pytest.fixture
def quiet_portal(transactional_db) -> Iterator[str]:
    """The portal under uvicorn with no metrics publisher."""
    with serve_live_portal(publisher=False) as base:
        yield base


def gated_page(page: playwright_api.Page) -> playwright_api.Page:
    page.add_init_script(GATE)
    return page


def test_a_version_page_shows_what_happened_before_its_sockets_joined(
    world, tmp_path, monkeypatch, quiet_portal
):
    from adapters.models import Adapter
    from adapters.services.validation import run_validation
    from tests.factories import adapter_files

    monkeypatch.setattr("adapters.services.uploads._enqueue_validation", lambda version_id: None)
    name = f"late-{uuid.uuid4().hex[:6]}"  # series nobody else records
    adapter = Adapter.objects.create(
        tenant=world.acme, name=name, base_model=world.base, created_by=world.users["alice"]
    )
    version = upload_files(world, "bob", adapter, adapter_files(tmp_path / "a"))
    path = reverse("version-detail", args=["acme", name, version.number])
    with chromium_page() as page:
        _log_in(gated_page(page), quiet_portal, "vera", path)
        status = page.get_by_test_id("status")
        charts = page.locator("[data-testid=live-charts-version]")
        expect(status).to_have_text("uploaded")
        expect(charts).to_have_attribute("data-requests-shown", "0")
        page.evaluate("document.getElementById('validation-report').dataset.stale = 'yes'")
        # Both happen while the sockets are away: the status event reaches nobody, and no
        # publisher runs to send the seconds again.
        _in_thread(lambda: run_validation(version_id=version.pk))
        _record(*(measurement("acme", f"{name}@1", at=time.time()) for _ in range(4)))
        page.evaluate("window.openSockets()")
        expect(status).to_have_text("validated", timeout=15_000)
        expect(status).to_have_class("state-validated")
        # The parts that follow the status are drawn again from the server too.
        expect(page.locator("#validation-report")).not_to_have_attribute("data-stale", "yes")
        expect(charts.locator("[data-live-state]")).to_have_text("live")
        expect(charts).to_have_attribute("data-requests-shown", "4", timeout=15_000)


def test_a_version_staged_before_the_socket_joins_can_be_picked(world, quiet_portal):
    from tests.gateway.playground_world import build_playground_world, make_version

    pw = build_playground_world(world)
    with chromium_page() as page:
        _log_in(gated_page(page), quiet_portal, "bob", "/t/acme/playground/")
        picker = page.get_by_test_id("pick-0")
        expect(picker.locator("option[value='support@2']")).to_have_count(1)
        expect(picker.locator("option[value='support@9']")).to_have_count(0)
        _in_thread(lambda: make_version(pw.world.support, 9, "staged"))
        page.evaluate("window.openSockets()")
        expect(page.get_by_test_id("socket-state")).to_have_text("connected", timeout=15_000)
        expect(picker.locator("option[value='support@9']")).to_have_count(1, timeout=15_000)
        expect(page.get_by_test_id("pick-1").locator("option[value='support@9']")).to_have_count(1)
