"""The fault suite's parts: a portal under uvicorn on the test database, what its callers saw,
and counts of everything that must be neither lost nor doubled."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.db import connection

from bench.upload_support import PortalServer
from tests.faults.record import REPO
from tests.paths import TEST_VAR


def portal_env(**extra: str) -> dict[str, str]:
    """A portal process on the test database and Redis, as the test process sees them."""
    db = connection.settings_dict
    return {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "ADAPTER_STORAGE_BACKEND": settings.ADAPTER_STORAGE_BACKEND,
        "ADAPTER_STORAGE_ROOT": str(settings.ADAPTER_STORAGE_ROOT),
        "PORTAL_VAR_DIR": str(TEST_VAR / "faults-portal"),
        **extra,
    }


def start_portal(name: str, **extra: str) -> PortalServer:
    log = TEST_VAR / f"faults-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    server = PortalServer(portal_env(**extra), log_path=log)
    server.start()
    return server


@dataclass
class Answer:
    status: int
    code: str  # the JSON error's code; "" for a success, "<not json>" when it was not JSON
    seconds: float


@dataclass
class CallerLog:
    """Every answer a caller got while a part was down, for the table's `caller_saw`."""

    answers: list[Answer] = field(default_factory=list)

    def call(self, client: httpx.Client, method: str, url: str, **kw: Any) -> Answer:
        started = time.monotonic()
        try:
            response = client.request(method, url, **kw)
        except httpx.TransportError as exc:
            answer = Answer(0, type(exc).__name__, time.monotonic() - started)
        else:
            answer = Answer(response.status_code, _code(response), time.monotonic() - started)
        self.answers.append(answer)
        return answer

    def not_json(self) -> list[Answer]:
        return [a for a in self.answers if a.code == "<not json>" or a.status == 0]

    def summary(self) -> str:
        kinds = Counter(f"{a.status} {a.code}" if a.code else f"{a.status}" for a in self.answers)
        slowest = max((a.seconds for a in self.answers), default=0.0)
        parts = ", ".join(f"{n} x {kind}" for kind, n in kinds.most_common())
        return f"{parts} (slowest answer {slowest:.2f} s)"


def _code(response: httpx.Response) -> str:
    if response.status_code < 400:
        return ""
    try:
        body = response.json()
    except ValueError:
        return "<not json>"
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("code"):
        return str(body["error"]["code"])
    if isinstance(body, dict) and "status" in body:  # /healthz: its verdict is its answer
        return f"healthz {body['status']}"
    return "<not json>"


def ledger() -> dict[str, int]:
    """Counts of the rows nothing may lose or double."""
    from adapters.models import AdapterVersion, Decision
    from core.audit_models import AuditEvent
    from gateway.models import DailyUsage

    rows: dict[str, int] = {
        "versions": AdapterVersion.objects.count(),
        "audit events": AuditEvent.objects.count(),
        "usage rows": DailyUsage.objects.count(),
    }
    rows["decisions (approvals, rejections, releases)"] = Decision.objects.count()
    return rows


def chain_verifies() -> bool:
    from portal.audit_verify import verify_chain

    return verify_chain().ok


def forget_other_tests_checkpoint() -> None:
    """The workers' storage root is shared by the session (tests/fixtures/celery_worker.py) and a
    beat in an earlier test may have left an audit checkpoint there of that test's chain, which
    this test's chain cannot reach: each fault test verifies its own chain."""
    from adapters.storage import get_storage
    from portal.audit_checkpoint import CHECKPOINT_KEY

    storage = get_storage()
    if storage.exists(CHECKPOINT_KEY):
        storage.delete(CHECKPOINT_KEY)


def spawn_worker(
    queue: str, *, pool: str, concurrency: int, **env: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """A Celery worker of the test's own on `queue` (test database and Redis), answering pings;
    its process group, to be SIGKILLed; and its log."""
    from portal.celery import app
    from tests.faults.record import wait_until
    from tests.fixtures.celery_worker import _service_env, _stop, worker_command

    log = TEST_VAR / f"faults-worker-{queue}.log"
    proc = subprocess.Popen(
        worker_command([queue], name=queue, pool=pool, concurrency=concurrency),
        cwd=REPO,
        env={**_service_env(queue), **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: app.control.ping(destination=[f"{queue}@{os.uname().nodename}"], timeout=0.5),
            timeout=60,
            what=f"the worker on {queue}",
        )
    except AssertionError:
        _stop(proc)
        raise
    return proc, log


def resident_on(handle: Any) -> set[str]:
    """What an engine holds, as its plugin says; empty while it is away or restarting."""
    from tests.workers.fleet import residency_report

    try:
        return set(residency_report(handle)["resident"])
    except Exception:  # noqa: BLE001 - away or restarting
        return set()


def log_tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""
