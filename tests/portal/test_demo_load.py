"""`manage.py demo_load`: the demo's background requests go to the gateway's chat route with the
demo inference token, and an unready gateway is retried rather than fatal."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core.management import CommandError, call_command


class Recording(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict]] = []
    answers: list[int] = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Recording.seen.append((self.path, self.headers["Authorization"], body))
        status = Recording.answers.pop(0) if Recording.answers else 200
        self.send_response(status)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"choices": []}\n\ndata: [DONE]\n\n')

    def log_message(self, *args):
        pass


@pytest.fixture
def gateway_stub():
    Recording.seen, Recording.answers = [], []
    server = HTTPServer(("127.0.0.1", 0), Recording)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_it_sends_chat_requests_with_the_demo_token(settings, tmp_path, gateway_stub):
    settings.VAR_DIR = tmp_path
    (tmp_path / "demo-inference-token").write_text("lp_abc_secret\n")
    Recording.answers = [503]  # the engine is still starting: retried, not fatal
    call_command("demo_load", url=gateway_stub, every=0.01, count=3, models="support,tiny-llama")
    assert [path for path, _, _ in Recording.seen] == ["/v1/chat/completions"] * 3
    assert {auth for _, auth, _ in Recording.seen} == {"Bearer lp_abc_secret"}
    assert [body["model"] for _, _, body in Recording.seen] == ["support", "tiny-llama", "support"]
    assert all(body["stream"] and body["max_tokens"] == 16 for _, _, body in Recording.seen)


def test_it_needs_the_seeded_token(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    with pytest.raises(CommandError, match="seed_demo"):
        call_command("demo_load", count=1)
