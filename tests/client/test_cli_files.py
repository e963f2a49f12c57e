"""The CLI's files and where its token goes: exports and the config are written 0600 and never
through a symbolic link; a page's `next` is followed only on the portal's own origin; plain
http:// to another machine is warned about."""

from __future__ import annotations

import json
import socket
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from lora_portal_client.client import Client
from lora_portal_client.config import plain_http_warning
from lora_portal_client.errors import PortalError
from lora_portal_client.refs import AdapterRef

from tests.client.conftest import Cli
from tests.client.steps import released

pytestmark = pytest.mark.django_db(transaction=True)


def test_exports_are_owner_only_and_never_written_through_a_link(cli, tmp_path):
    ref = released(cli, tmp_path)
    out = tmp_path / "audit.jsonl"
    assert cli("audit", "export", "--tenant", "acme", "-o", str(out)).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and out.read_text()
    record = tmp_path / "record.json"
    assert cli("evidence", ref, "-o", str(record)).returncode == 0
    assert stat.S_IMODE(record.stat().st_mode) == 0o600

    # A link planted where the export goes: refused, the file it points to untouched.
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    planted = tmp_path / "planted.jsonl"
    planted.symlink_to(victim)
    done = cli("audit", "export", "--tenant", "acme", "-o", str(planted))
    assert done.returncode == 4
    assert "file.symlink" in done.stderr and "symbolic link" in done.stderr
    assert victim.read_text() == "keep me" and planted.is_symlink()

    # ...or where a partial file would have gone: the export is written beside it, not through.
    (tmp_path / "side.jsonl.part").symlink_to(victim)
    side = tmp_path / "side.jsonl"
    assert cli("audit", "export", "--tenant", "acme", "-o", str(side)).returncode == 0
    assert victim.read_text() == "keep me"
    assert side.read_text().startswith(out.read_text())  # the log grew: exports are audited
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".side.jsonl.")]


def test_the_config_with_the_token_is_never_written_through_a_link(cli, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    config = cli.home / "lora-portal" / "config.json"
    config.parent.mkdir(parents=True)
    config.symlink_to(victim)
    done = cli("login", "--token-stdin", stdin=cli.tokens["alice"] + "\n", who=None)
    assert done.returncode == 4 and "symbolic link" in done.stderr
    assert victim.read_text() == "keep me"
    config.unlink()
    assert cli("login", "--token-stdin", stdin=cli.tokens["alice"] + "\n", who=None).returncode == 0
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and not config.is_symlink()


class _Recorder(BaseHTTPRequestHandler):
    """A test double of a portal (or of whatever a `next` URL names): answers one list page with
    the `next` the test gives it, and records each request with its Authorization header."""

    def do_GET(self) -> None:  # noqa: N802
        server: Any = self.server
        server.seen.append((self.path, self.headers.get("Authorization")))
        body = json.dumps(server.pages.get(self.path.split("?")[0], {"results": []})).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_double() -> Iterator[Any]:
    servers = []

    def start(pages: dict[str, Any], host: str = "127.0.0.1") -> Any:
        server: Any = ThreadingHTTPServer((host, 0), _Recorder)
        server.pages, server.seen = pages, []
        server.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_next_page_on_another_origin_is_not_followed(http_double):
    elsewhere = http_double({})
    portal = http_double({})
    versions = "/api/v1/tenants/acme/adapters/support/versions/"
    portal.pages[versions] = {"results": [{"number": 1}], "next": f"{portal.url}/page2?p=2"}
    portal.pages["/page2"] = {"results": [{"number": 2}], "next": None}
    with Client(portal.url, "lp_secret") as client:
        # The portal's own absolute URL is followed.
        assert client.versions(AdapterRef("acme", "support")) == [{"number": 1}, {"number": 2}]
    portal.pages[versions]["next"] = f"{elsewhere.url}/collect?page=2"
    with Client(portal.url, "lp_secret") as client, pytest.raises(PortalError) as refused:
        client.versions(AdapterRef("acme", "support"))
    assert refused.value.code == "response.foreign_url"
    assert elsewhere.url in refused.value.message
    assert elsewhere.seen == []  # the token never went there
    assert all(auth == "Bearer lp_secret" for _, auth in portal.seen)


def test_a_relative_or_protocol_relative_next_stays_on_the_portal(http_double):
    portal = http_double({})
    versions = "/api/v1/tenants/acme/adapters/support/versions/"
    portal.pages[versions] = {"results": [{"number": 1}], "next": "//example.invalid/x"}
    with Client(portal.url, "lp_secret") as client, pytest.raises(PortalError) as refused:
        client.versions(AdapterRef("acme", "support"))
    assert refused.value.code == "response.foreign_url"


def _non_loopback_address() -> str:
    """This machine's address on its outward interface (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        return str(probe.getsockname()[0])


def test_plain_http_to_another_machine_is_warned_about(http_double, tmp_path):
    assert plain_http_warning("https://portal.example.com") is None
    for local in ("http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"):
        assert plain_http_warning(local) is None
    assert "unencrypted" in (plain_http_warning("http://portal.example.com") or "")
    cli = Cli(url="", home=tmp_path)
    address = _non_loopback_address()
    double = http_double({"/api/v1/users/me/": {"username": "alice"}}, host="0.0.0.0")
    port = double.server_address[1]
    url = f"http://{address}:{port}"
    done = cli("whoami", "--json", who=None, LORA_PORTAL_URL=url, LORA_PORTAL_TOKEN="lp_test")
    assert done.returncode == 0, done.stderr
    assert f"warning: http://{address}:{port} is plain http:// to another machine" in done.stderr
    assert double.seen  # it did go (a warning, not a refusal)
    url = f"http://127.0.0.1:{port}"
    done = cli("whoami", "--json", who=None, LORA_PORTAL_URL=url, LORA_PORTAL_TOKEN="lp_test")
    assert "warning" not in done.stderr
