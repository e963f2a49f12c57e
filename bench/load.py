"""The portal under load on real engines: a burst, one cold adapter, then a soak.

    .venv/bin/python -m bench.load [--burst-clients 200] [--burst-seconds 60] [--cold-clients 50]
        [--soak-minutes 20] [--soak-rate 2] [--adapters 8] [--write-docs] [--keep-db]

Two CPU vLLM engines (engine.launcher, the portal plugin, `--max-loras 2 --max-cpu-loras 3`),
one Celery worker (threads, on the shared queue and both node queues: the gateway's
single-flight cold loads), one portal process (uvicorn portal.asgi: the gateway and the pages,
as deployed), on a database and Redis of their own. One tenant with `--adapters` active
adapters (files in the serving store, nothing loaded), an inference token and a signed-in owner.

1. Burst: `--burst-clients` clients, each sending streaming chat requests back to back for
   `--burst-seconds` (adapters Zipf(1.1) over the tenant's, max_tokens 4). Every answer is
   counted by status and error code; only 429 and capacity answers (503 `engine_busy`) are
   allowed. TTFT p50/p99 at the client. Meanwhile one prober reads three portal pages and an
   API list in turn (a session and a token), and their latency p99 is reported.
2. Cold: `--cold-clients` concurrent requests for one adapter never requested before: the
   worker's FleetAction `load` rows for it must be exactly one (the gateway's single flight).
3. Soak: `--soak-minutes` at `--soak-rate` requests a second, the demo load's mix
   (portal/management/commands/demo_load.py: streaming chat, max_tokens 16, alternately an
   adapter and the base model). Every 30 s: RSS, open file descriptors and sockets of every
   process (each engine's whole process tree, the worker, the portal, Redis) and PostgreSQL's
   connections to the bench database. Reported: the first and last sample and the change over
   the soak's second half (a leak keeps growing there; warm-up growth does not).

Database: BENCH_LOAD_DATABASE_URL (default .../lora_portal_bench_load; created, dropped at the end
unless --keep-db); Redis: BENCH_LOAD_REDIS_URL (default DB 9 of the local Redis; flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import gateway_support as gs
from bench.docs_section import add_report_arguments, markers, write_section
from engine.launcher import REPO_ROOT, EngineProcess, stop_engines

SECTION = "load"
BEGIN, END = markers(SECTION)
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_load"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
VAR = REPO_ROOT / "var" / "bench" / "load"
QUEUE = "bench-load"
ENGINE_NAMES = ("load-a", "load-b")
PROMPT = "Tell me about tea."
REQUEST_TIMEOUT_S = 300.0  # bounds a stuck request; nothing is judged by it
ALLOWED = {(429, "*"), (503, "engine_busy")}  # rate and capacity answers
PAGES = ("/", "/t/bench/", "/t/bench/a/a00/")
SAMPLE_EVERY_S = 30.0


@dataclass
class Answer:
    status: int
    code: str
    ttft_ms: float | None
    total_ms: float


@dataclass
class Phase:
    name: str
    seconds: float
    answers: list[Answer] = field(default_factory=list)
    page_ms: list[float] = field(default_factory=list)
    page_errors: int = 0

    def by_code(self) -> dict[str, int]:
        return dict(Counter(f"{a.status} {a.code}".strip() for a in self.answers).most_common())

    def disallowed(self) -> int:
        """Answers that are neither served (a 200 stream with a token and no error event) nor a
        rate or capacity refusal."""
        return sum(
            1
            for a in self.answers
            if (a.status, a.code) != (200, "")
            and (a.status, "*") not in ALLOWED
            and (a.status, a.code) not in ALLOWED
        )

    def ttft(self) -> gs.Summary:
        values = [a.ttft_ms for a in self.answers if a.ttft_ms is not None]
        return gs.Summary.of(values) if values else gs.Summary(0, 0, 0.0, 0.0, 0.0)


@dataclass
class Result:
    burst: Phase
    cold: Phase
    cold_loads: int
    soak: Phase
    samples: list[dict[str, Any]]
    machine: str
    args: dict[str, Any]
    seconds: float
    # The controller's pins and unpins on each engine during the burst ({"load-a pin": n}),
    # and whether each engine's process still ran after it (pin churn once killed one).
    burst_pins: dict[str, int] = field(default_factory=dict)
    alive_after_burst: dict[str, bool] = field(default_factory=dict)


# --- the clients ---


async def chat(
    client: httpx.AsyncClient, base: str, token: str, model: str, max_tokens: int
) -> Answer:
    body = orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
        }
    )
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    started = time.perf_counter()
    ttft: float | None = None
    try:
        async with client.stream(
            "POST", base + "/v1/chat/completions", content=body, headers=headers
        ) as response:
            if response.status_code != 200:
                data = await response.aread()
                try:
                    code = str(orjson.loads(data)["error"].get("code") or "")
                except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
                    code = "<not json>"
                return Answer(response.status_code, code, None, _ms(started))
            buffer = b""
            async for chunk in response.aiter_raw():
                buffer += chunk
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    if ttft is None and gs.first_token_at(event):
                        ttft = _ms(started)
                    if event.startswith(b"data:") and b'"error"' in event:
                        return Answer(200, "stream_error", ttft, _ms(started))
            return Answer(200, "" if ttft is not None else "no_token", ttft, _ms(started))
    except httpx.HTTPError as exc:
        return Answer(0, type(exc).__name__, ttft, _ms(started))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _client(n: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0),
        limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
    )


async def probe_pages(
    base: str, cookie: str, token: str, phase: Phase, stop: asyncio.Event
) -> None:
    """The portal's pages and an API list, one at a time, while the load runs."""
    async with httpx.AsyncClient(timeout=60, base_url=base) as client:
        i = 0
        while not stop.is_set():
            path = (*PAGES, "/api/v1/tenants/bench/adapters/")[i % (len(PAGES) + 1)]
            headers = (
                {"authorization": f"Bearer {token}"}
                if path.startswith("/api/")
                else {"cookie": cookie}
            )
            started = time.perf_counter()
            try:
                response = await client.get(path, headers=headers)
                ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            phase.page_ms.append(_ms(started))
            phase.page_errors += 0 if ok else 1
            i += 1
            await asyncio.sleep(0.25)


async def burst(
    base: str, token: str, cookie: str, read_token: str, models: list[str], args
) -> Phase:
    phase = Phase("burst", args.burst_seconds)
    rng = random.Random(1)
    weights = gs.zipf_weights(len(models), 1.1)
    stop = asyncio.Event()
    deadline = time.perf_counter() + args.burst_seconds
    async with _client(args.burst_clients) as client:

        async def one_client() -> None:
            while time.perf_counter() < deadline:
                model = rng.choices(models, weights=weights)[0]
                phase.answers.append(await chat(client, base, token, model, 4))

        prober = asyncio.create_task(probe_pages(base, cookie, read_token, phase, stop))
        await asyncio.gather(*(one_client() for _ in range(args.burst_clients)))
        stop.set()
        await prober
    return phase


async def cold(base: str, token: str, model: str, clients: int) -> Phase:
    phase = Phase("cold", 0)
    started = time.perf_counter()
    async with _client(clients) as client:
        phase.answers = list(
            await asyncio.gather(*(chat(client, base, token, model, 4) for _ in range(clients)))
        )
    phase.seconds = time.perf_counter() - started
    return phase


async def soak(base: str, token: str, models: list[str], args, sampler) -> tuple[Phase, list]:
    """A steady rate (open loop) with the demo load's mix, sampling the processes meanwhile."""
    phase = Phase("soak", args.soak_minutes * 60)
    samples: list[dict[str, Any]] = []
    started = time.perf_counter()
    end = started + phase.seconds
    next_sample = started
    pending: set[asyncio.Task[None]] = set()
    async with _client(64) as client:

        async def one(model: str) -> None:
            phase.answers.append(await chat(client, base, token, model, 16))

        i = 0
        while time.perf_counter() < end:
            now = time.perf_counter()
            if now >= next_sample:
                samples.append({"t": round(now - started, 1), **sampler()})
                next_sample += SAMPLE_EVERY_S
            task = asyncio.create_task(one(models[i % len(models)]))
            pending.add(task)
            task.add_done_callback(pending.discard)
            i += 1
            await asyncio.sleep(1 / args.soak_rate)
        await asyncio.gather(*pending)
    samples.append({"t": round(time.perf_counter() - started, 1), **sampler()})
    return phase, samples


# --- the processes' footprint ---


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def footprint(pid: int) -> dict[str, int]:
    """RSS (bytes), open fds and sockets of a process and its descendants."""
    rss = fds = sockets = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) * 1024
            for fd in Path(f"/proc/{p}/fd").iterdir():
                fds += 1
                try:
                    sockets += os.readlink(fd).startswith("socket:")
                except OSError:
                    continue
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return {"rss": rss, "fds": fds, "sockets": sockets}


def pg_connections(db_url: str) -> int:
    import psycopg

    name = db_url.rsplit("/", 1)[1]
    admin_url = db_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name]
        ).fetchone()
        return int(row[0]) if row else 0


# --- the services ---


@dataclass
class Services:
    engines: dict[str, EngineProcess] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    worker: Any = None
    portal: Any = None

    def start_engines(self, tiny: Path) -> None:
        self.engines, self.keys = gs.start_engines(
            tiny, VAR, ENGINE_NAMES, max_loras=2, max_cpu_loras=3
        )

    def start_worker(self, env: dict[str, str]) -> None:
        self.worker = gs.start_worker(QUEUE, ENGINE_NAMES, VAR / "worker.log", env)

    def stop_all(self) -> None:
        gs.stop_group(self.portal)
        gs.stop_group(self.worker)
        stop_engines(list(self.engines.values()))

    def sampler(self, db_url: str, redis_pid: int | None):
        def sample() -> dict[str, Any]:
            procs = {name: e.pid for name, e in self.engines.items() if e.pid is not None}
            procs["worker"] = self.worker.pid
            procs["portal"] = self.portal.pid
            if redis_pid:
                procs["redis"] = redis_pid
            return {
                **{name: footprint(pid) for name, pid in procs.items()},
                "postgres_connections": pg_connections(db_url),
            }

        return sample


def seed(services: Services, tiny: Path, n: int) -> tuple[gs.Tenancy, list[str], str, str, str]:
    """The tenant, engine rows, n adapters plus a cold one; a session cookie and a read token."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    from adapters.access import AccessContext
    from adapters.models import Adapter
    from tenants.services.tokens import token_issue
    from tests.workers.fleet import servable_version

    tenancy = gs.seed_tenancy(tiny)
    for name, proc in services.engines.items():
        gs.engine_row(name, proc, tenancy.base)
    names = []
    for i in range(n + 1):
        name = f"a{i:02d}" if i < n else "cold"
        adapter = Adapter.objects.create(
            tenant=tenancy.tenant, name=name, base_model=tenancy.base, max_concurrent_requests=256
        )
        servable_version(adapter, VAR / "src", seed=200 + i)
        names.append(name)
    owner = tenancy.owner
    session = SessionStore()
    session[SESSION_KEY] = str(owner.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = owner.get_session_auth_hash()
    session.save()
    cookie = f"{settings.SESSION_COOKIE_NAME}={session.session_key}"
    read = token_issue(access=AccessContext.for_user(owner), scopes=["read"]).plaintext
    return tenancy, names[:-1], "cold", cookie, read


def cold_loads(served_model: str, since: float) -> int:
    from datetime import UTC, datetime

    from workers.models import FleetAction

    return FleetAction.objects.filter(
        kind="load",
        served_name__contains=f"--{served_model}--",
        created_at__gte=datetime.fromtimestamp(since, UTC),
    ).count()


def pin_actions(since: float, until: float) -> dict[str, int]:
    """Pins and unpins the controller carried out per engine between two times."""
    from datetime import UTC, datetime

    from django.db.models import Count

    from workers.models import FleetAction

    rows = (
        FleetAction.objects.filter(
            kind__in=("pin", "unpin"),
            ok=True,
            created_at__gte=datetime.fromtimestamp(since, UTC),
            created_at__lt=datetime.fromtimestamp(until, UTC),
        )
        .values("engine__name", "kind")
        .annotate(n=Count("id"))
    )
    return {f"{r['engine__name']} {r['kind']}": r["n"] for r in rows}


def measure(args: argparse.Namespace, services: Services, db_url: str) -> Result:
    started, load_before = time.time(), os.getloadavg()[0]
    tiny = gs.tiny_model()
    services.start_engines(tiny)
    redis_url = os.environ.get("BENCH_LOAD_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys=services.keys)
    env.update({"CELERY_TASK_DEFAULT_QUEUE": QUEUE, "ENGINE_QUEUE_PREFIX": f"{QUEUE}.node."})
    # Auto-pins as deployed unless --no-auto-pins: with them, the first full run lost an engine
    # (vLLM's punica KeyError with a pin and a batch of unpinned adapters: see docs/benchmarks.md).
    env["FLEET_AUTO_PINS"] = "1" if args.auto_pins else "0"
    gs.django_setup(env, db_url)
    tenancy, names, cold_name, cookie, read_token = seed(services, tiny, args.adapters)
    for proc in services.engines.values():
        proc.wait_ready(timeout=gs.READY_TIMEOUT_S)
    services.start_worker(env)
    services.portal, base = gs.start_gateway(env, VAR / "portal.log", cpus=None)
    print(f"services up after {time.time() - started:.0f} s", flush=True)
    models = [*names, tenancy.base.name]
    burst_started = time.time()
    burst_phase = asyncio.run(burst(base, tenancy.token, cookie, read_token, models, args))
    time.sleep(2)  # a pass that was running when the burst ended records its actions
    burst_pins = pin_actions(burst_started, time.time())
    alive = {name: proc.is_running() for name, proc in services.engines.items()}
    print(f"burst: {burst_phase.by_code()}; pins {burst_pins}; alive {alive}", flush=True)
    cold_started = time.time()
    cold_phase = asyncio.run(cold(base, tenancy.token, cold_name, args.cold_clients))
    time.sleep(2)
    loads = cold_loads(cold_name, cold_started)
    print(f"cold: {cold_phase.by_code()}, loads {loads}", flush=True)
    redis_pid = _redis_pid(redis_url)
    soak_models = [names[0], tenancy.base.name]  # the demo mix: an adapter, then the base model
    soak_phase, samples = asyncio.run(
        soak(base, tenancy.token, soak_models, args, services.sampler(db_url, redis_pid))
    )
    print(f"soak: {soak_phase.by_code()}", flush=True)
    return Result(
        burst=burst_phase,
        cold=cold_phase,
        cold_loads=loads,
        soak=soak_phase,
        samples=samples,
        machine=gs.machine_note(load_before, list(services.engines.values())),
        args=vars(args),
        seconds=time.time() - started,
        burst_pins=burst_pins,
        alive_after_burst=alive,
    )


def _redis_pid(url: str) -> int | None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    except Exception:  # noqa: BLE001 - only the sampling of Redis is lost
        return None
    finally:
        client.close()


# --- the report ---


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f}"


def growth(samples: list[dict[str, Any]], proc: str, key: str) -> tuple[float, float, float]:
    """(first, last, change over the second half) of one process's measure."""
    values = [s[proc][key] for s in samples if proc in s]
    if not values:
        return (0.0, 0.0, 0.0)
    half = values[len(values) // 2 :]
    return (values[0], values[-1], half[-1] - half[0])


def render(r: Result, command: str) -> str:
    b, c, s = r.burst, r.cold, r.soak
    lines = [
        BEGIN,
        "## Load: a 200-client burst, one cold adapter, a 20-minute soak (`make bench-load`)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {r.machine}. Two CPU vLLM engines (`--max-loras 2 --max-cpu-loras 3`, plugin), "
        f"auto-pins {'on' if r.args.get('auto_pins', True) else 'off'}, one Celery worker "
        "(threads, 4), one portal process (uvicorn portal.asgi: the gateway "
        f"and the pages), PostgreSQL and Redis on loopback. Run took {r.seconds:.0f} s.",
        "",
        f"**Burst**: {r.args['burst_clients']} clients sending streaming chat requests back to back "
        f"for {b.seconds:.0f} s over {r.args['adapters']} adapters and the base model (Zipf 1.1, "
        "max_tokens 4).",
        "",
        "| answers | by status and code | not allowed (only 429 and 503 `engine_busy` are) | "
        "TTFT p50 ms | TTFT p99 ms | pages+API p99 ms (n, errors) |",
        "|---|---|---|---|---|---|",
        f"| {len(b.answers)} | {_codes(b)} | **{b.disallowed()}** | {b.ttft().p50:.0f} | "
        f"{b.ttft().p99:.0f} | {gs.percentile(b.page_ms, 0.99) if b.page_ms else 0:.0f} "
        f"({len(b.page_ms)}, {b.page_errors}) |",
        "",
    ]
    if r.alive_after_burst:
        pins = ", ".join(f"{k}: {v}" for k, v in sorted(r.burst_pins.items())) or "none"
        alive = ", ".join(
            f"{name} {'running' if up else '**gone**'}"
            for name, up in sorted(r.alive_after_burst.items())
        )
        lines += [
            f"Pins and unpins the controller made during the burst (FleetAction): {pins}. "
            f"Engines after the burst: {alive}.",
            "",
        ]
    lines += [
        f"**Cold adapter**: {r.args['cold_clients']} concurrent requests for an adapter never "
        f"requested before: **{r.cold_loads} load(s)** (FleetAction rows); answers {_codes(c)}; "
        f"TTFT p50 {c.ttft().p50:.0f} ms, p99 {c.ttft().p99:.0f} ms.",
        "",
        f"**Soak**: {s.seconds / 60:.0f} min at {r.args['soak_rate']:g} requests/s, the demo "
        "load's mix (streaming chat, max_tokens 16, an adapter and the base model in turn): "
        f"{len(s.answers)} answers, {_codes(s)}; TTFT p50 {s.ttft().p50:.0f} ms, "
        f"p99 {s.ttft().p99:.0f} ms. Every {SAMPLE_EVERY_S:.0f} s, each process (an engine "
        "counts its whole process tree):",
        "",
        "| process | RSS MiB first -> last | RSS change, 2nd half MiB | fds first -> last | "
        "fds change, 2nd half | sockets first -> last |",
        "|---|---|---|---|---|---|",
    ]
    procs = [k for k in r.samples[0] if isinstance(r.samples[0][k], dict)] if r.samples else []
    for proc in procs:
        rss = growth(r.samples, proc, "rss")
        fds = growth(r.samples, proc, "fds")
        socks = growth(r.samples, proc, "sockets")
        lines.append(
            f"| {proc} | {_mib(rss[0])} -> {_mib(rss[1])} | {rss[2] / 2**20:+.1f} | "
            f"{fds[0]:.0f} -> {fds[1]:.0f} | {fds[2]:+.0f} | {socks[0]:.0f} -> {socks[1]:.0f} |"
        )
    if r.samples:
        pg = [x["postgres_connections"] for x in r.samples]
        lines += [
            "",
            f"PostgreSQL connections to the bench database: {pg[0]} first, {pg[-1]} last, "
            f"at most {max(pg)}.",
        ]
    for note in r.args.get("note") or []:
        lines += ["", note]
    lines.append(END)
    return "\n".join(lines) + "\n"


def _codes(phase: Phase) -> str:
    return ", ".join(f"{k or '200'}: {v}" for k, v in phase.by_code().items())


def load_result(var: Path) -> Result:
    """The last run's result.json as a Result."""
    data = json.loads((var / "result.json").read_text())
    for name in ("burst", "cold", "soak"):
        phase = data[name]
        phase["answers"] = [Answer(**a) for a in phase["answers"]]
        data[name] = Phase(**phase)
    return Result(**data)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burst-clients", type=int, default=200)
    parser.add_argument("--burst-seconds", type=float, default=60)
    parser.add_argument("--cold-clients", type=int, default=50)
    parser.add_argument("--soak-minutes", type=float, default=20)
    parser.add_argument("--soak-rate", type=float, default=2)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument(
        "--auto-pins",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the controller's auto-pins, as deployed (--no-auto-pins: off)",
    )
    add_report_arguments(parser)
    args = parser.parse_args()
    if args.render_only:
        result = load_result(VAR)
        result.args["note"] = [*(result.args.get("note") or []), *args.note]
        section = render(result, args.render_only)
        print(section)
        if args.write_docs:
            write_section(SECTION, section)
        return
    db_url = os.environ.get("BENCH_LOAD_DATABASE_URL", DEFAULT_DB_URL)
    services = Services()
    result = gs.measure_and_save(
        VAR, db_url, args.keep_db, services, lambda: measure(args, services, db_url)
    )
    section = render(result, " ".join([".venv/bin/python -m bench.load", *sys.argv[1:]]))
    print(section)
    if args.write_docs:
        write_section(SECTION, section)


if __name__ == "__main__":
    main()
