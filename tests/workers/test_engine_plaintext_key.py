"""The prober never sends an engine's key over plain HTTP to another host, unless
ENGINE_ALLOW_PLAINTEXT_KEY trusts the network; loopback and https are always fine."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from workers.models import Engine, EngineState
from workers.services.engines import engines_probe_all

pytestmark = pytest.mark.django_db


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        key = self.headers.get("X-Portal-Engine-Key", "")
        self.seen.append((self.path, key))
        # A guarded engine: only /health is open; anything else without the key is 401.
        keyed = key == "the-engine-key"
        self.send_response(200 if self.path == "/health" else (404 if keyed else 401))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def this_machines_network_address() -> str:
    """The address of the interface the default route leaves by (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
        except OSError:
            pytest.skip("no network interface besides loopback")
        address = probe.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("no network interface besides loopback")
    return address


@pytest.fixture
def engine_server():
    _Recorder.seen = []
    server = ThreadingHTTPServer(("0.0.0.0", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], _Recorder.seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def keyed(world, settings):
    settings.DEBUG = False
    settings.PORTAL_ENGINE_KEYS = {"engine-x": "the-engine-key"}


def engine_at(world, url: str) -> Engine:
    return Engine.objects.create(
        name="engine-x", base_model=world.base, url=url, state=EngineState.UP, pool="shared"
    )


def test_a_plain_http_engine_on_another_host_gets_no_key_and_is_marked_down(
    world, keyed, engine_server
):
    port, seen = engine_server
    engine = engine_at(world, f"http://{this_machines_network_address()}:{port}")
    assert engines_probe_all()["engine-x"].startswith("engine.plaintext_key:")
    assert seen == []  # nothing at all was sent, so no key crossed the network
    engine.refresh_from_db()
    assert engine.state == EngineState.DOWN
    assert "ENGINE_ALLOW_PLAINTEXT_KEY" in engine.last_error


def test_a_trusted_network_setting_lets_the_probe_through(world, keyed, settings, engine_server):
    settings.ENGINE_ALLOW_PLAINTEXT_KEY = True
    port, seen = engine_server
    engine_at(world, f"http://{this_machines_network_address()}:{port}")
    assert engines_probe_all()["engine-x"] == "up"
    assert ("/health", "the-engine-key") in seen


def test_loopback_engines_get_their_key_over_plain_http(world, keyed, engine_server):
    port, seen = engine_server
    engine_at(world, f"http://127.0.0.1:{port}")
    assert engines_probe_all()["engine-x"] == "up"
    assert ("/health", "the-engine-key") in seen
