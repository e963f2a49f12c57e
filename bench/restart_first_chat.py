"""An engine restarted under a one-engine pool: how long until a caller's chat is served again.

    .venv/bin/python -m bench.restart_first_chat [--restarts 5] [--write-docs] [--keep-db]

Starts for real, all on loopback: one CPU vLLM engine with the portal plugin (as bench.fleet_real
starts its engines), one Celery worker and one beat with the deployed schedule (reconcile and
prober every 30 s), and one gateway (uvicorn serving portal.asgi with the deployed gateway
settings). Its own PostgreSQL database (BENCH_RESTART_DATABASE_URL, default
.../lora_portal_bench_restart: created, dropped at the end unless --keep-db) and its own Redis
database (BENCH_RESTART_REDIS_URL, default DB 12, flushed at start and end).

One version is wanted on the engine and resident. Then R times: the engine is stopped (SIGTERM
to its process group) and started again; nobody calls anything while it is away. From its start
the bench polls, every 50 ms, the engine's /ping and the residency API (as an operator reads it,
/api/v1/engines/<engine>/residency/); from the moment the API shows the version resident it
sends a chat every 50 ms with the official `openai` client (no retries) until one is served.
"Resident" here is resident as observed since the stop: until the fleet notices an engine gone (a
request that fails on it, or the prober's tick), its rows still say what it held.
Measured per restart: /ping answered -> the API shows the version resident -> first chat served,
and the chats refused on the way. Goal: the first chat after the API shows the version resident
is served (0 refused), well within a second.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import shutil
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from bench.docs_section import DOCS, markers, write_section
from bench.fleet_real import (
    ENGINE_NAMES,
    MAX_CPU_LORAS,
    MAX_LORA_RANK,
    MAX_LORAS,
    QUEUE,
    READY_TIMEOUT_S,
    VAR,
    Services,
    _flush_redis,
    _free_port,
    _sigterm_runs_cleanup,
    _tiny_model,
    seed,
    wait_until,
)
from engine.launcher import REPO_ROOT, EngineConfig, EngineProcess

BEGIN, END = markers("restart-first-chat")
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_restart"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/12"
ENGINE = ENGINE_NAMES[0]
POLL_S = 0.05
RESTORE_TIMEOUT_S = 600.0  # bounds a broken run only
OWN = REPO_ROOT / "var" / "bench" / "restart-first-chat"  # the worker's and beat's logs: VAR


@dataclass
class RestartSample:
    """One restart, in seconds from the engine's start."""

    ping_s: float  # its /ping answered
    shown_s: float  # the residency API showed the version resident
    served_s: float  # the first chat served
    refused: list[str] = field(default_factory=list)  # chats refused after `shown_s`

    @property
    def shown_to_served_s(self) -> float:
        return self.served_s - self.shown_s

    @property
    def ping_to_served_s(self) -> float:
        return self.served_s - self.ping_s


@dataclass
class BenchResult:
    restarts: list[RestartSample]
    engine_start_s: float
    seconds: float
    load_average: float

    @property
    def goal_met(self) -> bool:
        return bool(self.restarts) and not any(s.refused for s in self.restarts)


def render(r: BenchResult, command: str) -> str:
    rows = [
        f"| {i} | {s.ping_s:.1f} | {s.shown_s - s.ping_s:.2f} | {s.shown_to_served_s:.2f} | "
        f"{s.ping_to_served_s:.2f} | {len(s.refused)} |"
        for i, s in enumerate(r.restarts, 1)
    ]
    shown = [s.shown_to_served_s for s in r.restarts]
    ping = [s.ping_to_served_s for s in r.restarts]
    verdict = "met" if r.goal_met else "not met"
    return "\n".join(
        [
            BEGIN,
            "## Engine restart -> first chat served (one-engine pool)",
            "",
            f"Command: `{command}`. One CPU engine (`--max-loras {MAX_LORAS} --max-cpu-loras "
            f"{MAX_CPU_LORAS}`), its worker, a beat with the deployed schedule (reconcile and "
            "prober every 30 s), one gateway with the deployed settings; the engine stopped "
            "(SIGTERM) and started again, nobody calling meanwhile; polled every 50 ms. "
            f"{len(r.restarts)} restarts in {r.seconds:.0f} s, load average "
            f"{r.load_average:.1f} on the machine's 2 cores (shared).",
            "",
            "| restart | engine start -> /ping (s) | /ping -> API shows resident (s) "
            "| API shows resident -> first chat served (s) | /ping -> first chat served (s) "
            "| chats refused after the API showed it |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"Median: API shows resident -> served {statistics.median(shown):.2f} s (max "
            f"{max(shown):.2f} s); /ping -> served {statistics.median(ping):.2f} s (max "
            f"{max(ping):.2f} s). Goal (the first chat after the API shows the version "
            f"resident is served): {verdict}.",
            "",
            "What /ping -> resident is made of: the fleet's watch probes an engine it found away "
            "every `FLEET_DOWN_PROBE_SECONDS` (2 s); the probe sends a one-token request; the "
            "converge pass loads the version and moves the engine up in the transaction that "
            "writes its residency (docs/reliability.md, the restart path).",
            END,
        ]
    )


def start_engine(services: Services) -> None:
    tiny = _tiny_model()
    services.keys[ENGINE] = secrets.token_hex(16)
    config = EngineConfig(
        model=tiny / "base",
        port=_free_port(),
        max_loras=MAX_LORAS,
        max_cpu_loras=MAX_CPU_LORAS,
        max_lora_rank=MAX_LORA_RANK,
        adapter_root=OWN / f"{ENGINE}-adapters",
        log_path=OWN / f"{ENGINE}.log",
        engine_key=services.keys[ENGINE],
        die_with_parent=True,
    )
    services.engines[ENGINE] = EngineProcess(config).start()


def _pings(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url + "/ping", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def measure_restart(
    engine: EngineProcess, gateway: str, operator: str, chat: Any, served_name: str
) -> RestartSample:
    import httpx

    stopped = time.time()
    engine.stop()
    engine.start()
    started = time.monotonic()
    ping_s = shown_s = None
    refused: list[str] = []
    with httpx.Client(headers={"authorization": f"Bearer {operator}"}, timeout=10) as api:
        while time.monotonic() - started < RESTORE_TIMEOUT_S:
            now = time.monotonic() - started
            if ping_s is None and _pings(engine.base_url):
                ping_s = now
            if shown_s is None:
                rows = api.get(f"{gateway}/api/v1/engines/{ENGINE}/residency/").json()["results"]
                # Resident again: observed since the stop (until the fleet notices the engine
                # gone, at a failed request or the prober's tick, its rows still say resident).
                if any(
                    r["served_name"] == served_name
                    and r["observed_state"] in ("resident_gpu", "resident_cpu", "pinned")
                    and r["observed_at"]
                    and datetime.fromisoformat(r["observed_at"]).timestamp() >= stopped
                    for r in rows
                ):
                    shown_s = now
            if shown_s is not None:
                answer = chat()
                if answer == served_name:
                    engine.wait_ready(timeout=READY_TIMEOUT_S)
                    return RestartSample(
                        ping_s if ping_s is not None else now,
                        shown_s,
                        time.monotonic() - started,
                        refused,
                    )
                refused.append(answer)
            time.sleep(POLL_S)
    raise RuntimeError(f"no chat served within {RESTORE_TIMEOUT_S:.0f} s of the engine's start")


def measure(args: argparse.Namespace, services: Services, db_url: str) -> BenchResult:
    from bench.list_versions import recreate_database

    started = time.time()
    start_engine(services)
    redis_url = os.environ.get("BENCH_RESTART_REDIS_URL", DEFAULT_REDIS_URL)
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": db_url,
        "REDIS_URL": redis_url,
        "PORTAL_VAR_DIR": str(OWN / "portal"),
        "ADAPTER_STORAGE_BACKEND": "local",
        "ADAPTER_STORAGE_ROOT": str(OWN / "storage"),
        "CELERY_TASK_DEFAULT_QUEUE": QUEUE,
        "ENGINE_QUEUE_PREFIX": f"{QUEUE}.node.",
        "PORTAL_ENGINE_KEYS": json.dumps(services.keys),
        "CHANNELS_PREFIX": "bench-restart-asgi",
    }
    os.environ.update(env)
    _flush_redis(redis_url)
    recreate_database(db_url)

    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    import openai
    from django.core.management import call_command

    from adapters.access import AccessContext
    from adapters.models import VersionStatus
    from portal.celery import app
    from tenants.services.tokens import token_issue
    from tests.factories import make_user
    from tests.fixtures.gateway import serve_portal
    from tests.workers.fleet import servable_version
    from workers.desired import set_desired

    call_command("migrate", verbosity=0)
    world = seed(services, _tiny_model())
    engine_start_s = services.wait_engines()[0]
    services.start_worker({**os.environ, **env})
    wait_until(
        "the Celery worker",
        lambda: app.control.ping(destination=[f"{QUEUE}@{os.uname().nodename}"], timeout=0.5),
        timeout=120,
        every=0.5,
    )
    services.start_beat({**os.environ, **env})
    version = servable_version(world.adapter, world.tmp, seed=3100, status=VersionStatus.ACTIVE)
    set_desired(version=version, engine=world.rows[ENGINE], state="registered", reason="bench")
    caller = token_issue(
        access=AccessContext.for_user(world.owner),
        scopes=["inference"],
        tenant=world.adapter.tenant,
    ).plaintext
    operator = token_issue(
        access=AccessContext.for_user(make_user("bench-operator", roles=("operator",))),
        scopes=["read"],
    ).plaintext
    with serve_portal({**os.environ, **env}) as gateway:
        client = openai.OpenAI(base_url=gateway + "/v1", api_key=caller, max_retries=0)

        def chat() -> str:
            try:
                return client.chat.completions.create(
                    model="support", messages=[{"role": "user", "content": "tea"}], max_tokens=2
                ).model
            except openai.APIError as exc:
                return f"{getattr(exc, 'status_code', '')} {exc.message}"[:160]

        wait_until(
            "the version served", lambda: chat() == version.served_name, timeout=300, every=0.5
        )
        samples = [
            measure_restart(services.engines[ENGINE], gateway, operator, chat, version.served_name)
            for _ in range(args.restarts)
        ]
    return BenchResult(samples, engine_start_s, time.time() - started, os.getloadavg()[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    parser.add_argument("--keep-db", action="store_true", help="leave the database to inspect")
    args = parser.parse_args()

    from bench.list_versions import drop_database

    shutil.rmtree(OWN, ignore_errors=True)
    OWN.mkdir(parents=True)
    VAR.mkdir(parents=True, exist_ok=True)
    db_url = os.environ.get("BENCH_RESTART_DATABASE_URL", DEFAULT_DB_URL)
    services = Services()
    try:
        with _sigterm_runs_cleanup():
            result = measure(args, services, db_url)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut this short
        services.stop_all()
        if os.environ.get("DATABASE_URL") == db_url:
            _flush_redis(os.environ["REDIS_URL"])
            if not args.keep_db:
                drop_database(db_url)
    (OWN / "result.json").write_text(json.dumps([asdict(s) for s in result.restarts], indent=2))
    command = " ".join([".venv/bin/python -m bench.restart_first_chat", *sys.argv[1:]])
    section = render(result, command)
    print(section)
    if args.write_docs:
        write_section("restart-first-chat", section)


if __name__ == "__main__":
    main()
