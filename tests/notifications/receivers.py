"""Real receivers on loopback for the notification tests: an SMTP server (aiosmtpd, in its own
thread) and an HTTP server (http.server, in its own thread) that fails the first posts it gets."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Mail:
    sender: str
    recipients: list[str]
    content: bytes


class _Collect:
    def __init__(self) -> None:
        self.mails: list[Mail] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.mails.append(
            Mail(envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.original_content))
        )
        return "250 Message accepted for delivery"


class SmtpServer:
    def __init__(self) -> None:
        self.port = free_port()
        self._handler = _Collect()
        self._controller = Controller(self._handler, hostname="127.0.0.1", port=self.port)

    @property
    def mails(self) -> list[Mail]:
        return self._handler.mails

    def start(self) -> None:
        self._controller.start()

    def stop(self) -> None:
        self._controller.stop()


@dataclass
class Post:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class WebhookReceiver:
    """Answers `fail_first` posts with 500, then 200; keeps every post."""

    fail_first: int = 0
    posts: list[Post] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/portal"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.posts.append(Post(self.path, dict(self.headers.items()), body))
                failing = len(receiver.posts) <= receiver.fail_first
                self.send_response(500 if failing else 200)
                self.end_headers()
                self.wfile.write(b"try later" if failing else b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
