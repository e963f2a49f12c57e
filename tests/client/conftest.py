"""The CLI against a live portal: uvicorn serving portal.asgi (tests/fixtures/gateway.py) with the
session's Celery worker behind it, on committed data; each call is a real `python -m
lora_portal_client` process, so exit codes and output are what a pipeline sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from adapters.access import AccessContext
from tenants.services.tokens import token_issue
from tests.paths import REPO

CLIENT_SRC = REPO / "client"


@dataclass
class Cli:
    """Runs `lora-portal` as `who` (a token of theirs in LORA_PORTAL_TOKEN), or with no token."""

    url: str
    home: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def env(self, who: str | None, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LORA_PORTAL_")}
        env.update(
            LORA_PORTAL_URL=self.url,
            XDG_CONFIG_HOME=str(self.home),
            # The client is installed editable by `make deps`; the source path makes a worktree's
            # copy win, and works before it is installed.
            PYTHONPATH=os.pathsep.join([str(CLIENT_SRC), env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            ),
            COLUMNS="200",
        )
        if who is not None:
            env["LORA_PORTAL_TOKEN"] = self.tokens[who]
        env.update(extra)
        return env

    def __call__(
        self, *args: str, who: str | None = "alice", stdin: str = "", **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lora_portal_client", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(who, **env),
            timeout=300,
            cwd=self.home,
        )

    def json(self, *args: str, who: str | None = "alice", code: int = 0, **env: str) -> Any:
        done = self(*args, "--json", who=who, **env)
        assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
        return json.loads(done.stdout)


def issue_token(world: Any, who: str, scopes: list[str], tenant: Any = None) -> str:
    issued = token_issue(
        access=AccessContext.for_user(world.users[who]), scopes=scopes, tenant=tenant
    )
    return issued.plaintext


@pytest.fixture
def live_world(transactional_db, world, settings, celery_worker_process):
    """The personas, committed, with storage where the worker and the served portal keep it."""
    settings.ADAPTER_STORAGE_ROOT = str(celery_worker_process["storage_root"])
    return world


@pytest.fixture
def cli(live_world, gateway_server, tmp_path) -> Cli:
    """alice (owner of acme), bob (maintainer), rita (reviewer), charlie (owner of globex)."""
    run = Cli(url=gateway_server, home=tmp_path / "home")
    run.home.mkdir()
    for who, scopes in (
        ("alice", ["read", "write", "approve"]),
        ("bob", ["read", "write"]),
        ("rita", ["read", "approve"]),
        ("charlie", ["read", "write", "approve"]),
    ):
        run.tokens[who] = issue_token(live_world, who, scopes)
    return run


@pytest.fixture(scope="session")
def s3_portal(celery_worker_process, s3_server) -> Iterator[dict[str, str]]:
    """A second served portal whose storage is the moto S3 server, so direct uploads work.

    Its tasks go to a queue no worker reads: the session's worker keeps its files on local disk
    and could not validate these versions; the direct-upload tests check what push stored.
    """
    from tests.fixtures.celery_worker import _service_env
    from tests.fixtures.gateway import serve_portal

    bucket = f"cli-{uuid.uuid4().hex[:12]}"
    s3_server.admin.create_bucket(Bucket=bucket)
    env = _service_env(
        f"{celery_worker_process['queue']}-unread",
        ADAPTER_STORAGE_BACKEND="s3",
        S3_BUCKET=bucket,
        S3_ENDPOINT_URL=s3_server.endpoint_url,
        S3_REGION=s3_server.region,
        S3_ACCESS_KEY_ID=s3_server.access_key_id,
        S3_SECRET_ACCESS_KEY=s3_server.secret_access_key,
    )
    with serve_portal(env) as base:
        yield {"url": base, "bucket": bucket}
