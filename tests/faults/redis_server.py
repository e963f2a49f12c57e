"""A Redis server of the fault suite's own, on a free loopback port: paused, killed, restarted."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bench.upload_support import free_port


class OwnRedis:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=2)

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=(self.folder / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def pause(self, ms: int) -> None:
        """Every client's commands wait ms (the server takes connections and reads nothing)."""
        self.client().execute_command("CLIENT", "PAUSE", str(ms), "ALL")

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The server process stopped (SIGSTOP) for the block: the kernel still completes TCP
        handshakes, but nothing is read or answered, on old connections or new ones."""
        assert self.proc is not None, "the server is not running"
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        self.kill()


@pytest.fixture
def own_redis(tmp_path):
    """A Redis server of the test's own, stopped at its end."""
    server = OwnRedis(tmp_path / "redis")
    server.start()
    yield server
    server.stop()
