"""PostgreSQL connections per portal process, measured: a real uvicorn (the web and gateway
containers' process) under concurrent API and /healthz requests, and a real Celery worker
(prefork, as the worker containers run it) running tasks. docs/deploy.md sizes max_connections
from these numbers and from DATABASE_POOL_MAX, the bound.

    make bench-db-connections   # DATABASE_URL: a migrated PostgreSQL database of its own

Connections are counted in pg_stat_activity (this database, other than the counting session)
every 50 ms while only the measured process runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")  # the bench's own process only (a SECRET_KEY)

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
import psycopg  # noqa: E402
from django.conf import settings  # noqa: E402

from bench.docs_section import markers, write_section  # noqa: E402
from bench.gateway_support import free_port, spawn, stop_group, wait_http  # noqa: E402

SECTION = "db-connections"
LOGS = Path("var/bench/db-connections")
USER, PASSWORD = "bench-db-connections", "bench-db-connections-password"
PATHS = ["/healthz", "/api/v1/tenants/", "/api/v1/base-models/", "/api/v1/engines/"]


class Counter:
    """Samples this database's connections (besides its own) until stopped; keeps the peak."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        return int(row[0]) if row else 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(0.05)

    def __enter__(self) -> Counter:
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _env(pool_max: int) -> dict[str, str]:
    return {**os.environ, "DATABASE_POOL_MAX": str(pool_max), "PYTHONUNBUFFERED": "1"}


async def _load(base: str, token: str, concurrency: int, requests: int) -> int:
    done = 0
    headers = {"Authorization": f"Bearer {token}", "Host": "localhost"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:

        async def worker(index: int) -> None:
            nonlocal done
            while done < requests:
                done += 1
                await client.get(PATHS[(index + done) % len(PATHS)])

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return done


_MAKE_USER = f"""
from django.contrib.auth import get_user_model
user, _ = get_user_model().objects.get_or_create(username={USER!r})
user.is_superuser = True
user.set_password({PASSWORD!r})
user.save()
"""


def _token(base: str) -> str:
    # In a process of its own: this one opens no database connection (it would be counted).
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", _MAKE_USER], check=True, capture_output=True
    )
    answer = httpx.post(
        f"{base}/api/v1/auth/token/",
        json={"username": USER, "password": PASSWORD, "scopes": ["read"], "expires_in_days": 1},
        headers={"Host": "localhost"},
        timeout=60,
    )
    answer.raise_for_status()
    return str(answer.json()["token"])


def measure_uvicorn(dsn: str, pool_max: int, concurrency: int, requests: int) -> dict[str, int]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1",
        "--port", str(port), "--lifespan", "off", "--ws-per-message-deflate", "false",
    ]  # fmt: skip
    proc = spawn(cmd, log=LOGS / "uvicorn.log", env=_env(pool_max))
    try:
        with Counter(dsn) as counter:
            before = counter.now()
            wait_http(f"{base}/healthz", proc, LOGS / "uvicorn.log")
            token = _token(base)
            idle = counter.now() - before
            asyncio.run(_load(base, token, concurrency, requests))
        return {"idle": idle, "peak": counter.peak - before}
    finally:
        stop_group(proc)


def measure_worker(dsn: str, pool_max: int, concurrency: int, tasks: int) -> dict[str, int]:
    queue = f"bench-db-{os.getpid()}"
    cmd = [
        sys.executable, "-m", "celery", "-A", "portal", "worker", "--loglevel", "INFO",
        "-Q", queue, "--concurrency", str(concurrency), "-n", f"{queue}@%h",
    ]  # fmt: skip
    proc = spawn(cmd, log=LOGS / "worker.log", env=_env(pool_max))
    try:
        from portal.celery import app

        with Counter(dsn) as counter:
            before = counter.now()
            deadline = time.monotonic() + 180
            while not app.control.ping(destination=[f"{queue}@{os.uname().nodename}"], timeout=1):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((LOGS / "worker.log").read_text()[-3000:])
            idle = counter.now() - before
            # probe_engines reads every engine (none here) and writes nothing: a few queries.
            for _ in range(tasks):
                app.send_task("workers.tasks.probe_engines", queue=queue)
            deadline = time.monotonic() + 300
            while _succeeded(LOGS / "worker.log") < tasks and time.monotonic() < deadline:
                time.sleep(0.2)
        return {"idle": idle, "peak": counter.peak - before}
    finally:
        stop_group(proc)


def _succeeded(log: Path) -> int:
    return len(re.findall(r"probe_engines\[[^\]]+\] succeeded", log.read_text(errors="replace")))


def section(
    rows: list[tuple[str, dict[str, int]]], command: str, pool_max: int, version: str
) -> str:
    begin, end = markers(SECTION)
    table = "\n".join(f"| {what} | {r['idle']} | {r['peak']} |" for what, r in rows)
    return f"""{begin}
## PostgreSQL connections per process (`bench/db_connections.py`)

`{command}` (`make bench-db-connections`), DATABASE_POOL_MAX={pool_max} (the manifests'
value), PostgreSQL {version} on this machine. Connections this process holds, idle after
start and at the peak of the load (pg_stat_activity sampled every 50 ms).

| process | idle | peak under load |
|---|---|---|
{table}
{end}
"""


def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool-max", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("postgresql"):
        raise SystemExit("DATABASE_URL must name a PostgreSQL database (pools are PostgreSQL's)")
    dsn = f"host={db['HOST']} port={db['PORT'] or 5432} user={db['USER']} dbname={db['NAME']}"
    if db.get("PASSWORD"):
        dsn += f" password={db['PASSWORD']}"
    web = measure_uvicorn(dsn, args.pool_max, args.concurrency, args.requests)
    print("uvicorn", web)
    worker = measure_worker(dsn, args.pool_max, args.worker_concurrency, args.tasks)
    print("celery worker", worker)
    rows = [
        (f"uvicorn (web, gateway): {args.requests} requests, {args.concurrency} at once", web),
        (
            f"Celery worker, prefork --concurrency {args.worker_concurrency}: {args.tasks} tasks",
            worker,
        ),
    ]
    if args.write_docs:
        command = (
            f"python -m bench.db_connections --pool-max {args.pool_max} --concurrency "
            f"{args.concurrency} --requests {args.requests} --worker-concurrency "
            f"{args.worker_concurrency} --tasks {args.tasks} --write-docs"
        )
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        write_section(SECTION, section(rows, command, args.pool_max, str(row[0] if row else "")))


if __name__ == "__main__":
    main()
