"""Live metrics fan-out: many websocket subscribers receiving the 1 Hz per-tenant updates.

    .venv/bin/python -m bench.live_fanout [--subscribers 500] [--tenants 50] [--seconds 60]
        [--warmup 10] [--server uvicorn|daphne] [--write-docs] [--keep-db]

What runs, all real: the portal's ASGI app (portal.asgi: origin check, session auth, the
LiveMetricsConsumer) under one uvicorn (or daphne) process; the Redis channel layer; the publisher
process (`manage.py publish_live_metrics`, portal/live_publisher.py). This process plays the
gateway and the browsers: each second it records two requests per tenant through the gateway's
own Recorder (so every tenant's group has numbers to send), and it holds the subscribers' sockets
(the `websockets` client on one event loop), each logged in as a member of one tenant
(subscribers spread evenly over the tenants).

Measured over the window after the warm-up:
- delay publish -> receipt: the publisher stamps `sent_at` (time.time()) just before its
  group_send; a subscriber subtracts it from its own time.time() on receipt (same machine, same
  clock): p50 / p99 / max over every message received;
- messages received vs expected (subscribers x seconds), and the most any socket got in one
  second (the publisher's "at most one a second per group");
- every message checked to carry its own tenant's versions only;
- CPU of the portal's ASGI process and of the publisher (utime + stime from /proc over the
  window): per subscriber, in CPU-ms per second (= per message delivered).

Database: BENCH_LIVE_DATABASE_URL (default .../lora_portal_bench_live; created, dropped at the end
unless --keep-db); Redis: BENCH_LIVE_REDIS_URL (default DB 10, flushed at start and end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import gateway_support as gs
from bench.docs_section import write_section
from engine.launcher import REPO_ROOT

SECTION = "live-fanout"
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_live"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/10"
VAR = REPO_ROOT / "var" / "bench" / "live-fanout"
GOAL_P99_MS = 250.0
PASSWORD = "bench-live-password"


MODES = {
    "generation": "sockets re-check access from the database when their access generation moves "
    "(here: never during the window) or every 30 s, each socket at its own phase",
    "tenant-changes": "the bench moves one tenant's access generation every second, in turn (a "
    "membership or grant changing somewhere every second): that tenant's sockets re-check, the "
    "others' do not",
    "every-message": "the bench moves the global access generation every second, so every "
    "socket re-checks its access from the database on every message (what a per-event "
    "database re-check would cost)",
}


@dataclass
class Run:
    mode: str
    seconds: float
    connected: int
    expected_messages: int
    received: int
    delay_p50_ms: float
    delay_p99_ms: float
    delay_max_ms: float
    most_in_one_second: int
    foreign_versions: int
    server_cpu_s: float
    publisher_cpu_s: float
    client_cpu_s: float
    loadavg_before: float
    loadavg_after: float

    @property
    def server_cpu_ms_per_subscriber_second(self) -> float:
        return 1000 * self.server_cpu_s / self.seconds / max(1, self.connected)


@dataclass
class Result:
    server: str
    subscribers: int
    tenants: int
    machine: str
    started: str
    runs: list[Run] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    layer: str = "channels_redis.core.RedisChannelLayer"


# --- arithmetic (tests/bench/test_live_fanout_report.py) ---


def summarize_delays(delays_ms: list[float]) -> tuple[float, float, float]:
    return (
        gs.percentile(delays_ms, 0.5),
        gs.percentile(delays_ms, 0.99),
        max(delays_ms),
    )


def render(result: Result, command: str) -> str:
    r = result
    runs = r.runs

    def row(label: str, cell) -> str:
        return f"| {label} | " + " | ".join(cell(run) for run in runs) + " |"

    def verdict(run: Run) -> str:
        met = "met" if run.delay_p99_ms < GOAL_P99_MS else "NOT met"
        return f"{run.delay_p99_ms:.1f} ms ({met})"

    lines = [
        f"<!-- {SECTION}:begin -->",
        "## Live metrics fan-out",
        "",
        f"`{command}` ({r.started}, {r.machine})",
        "",
        f"{r.subscribers} websocket subscribers across {r.tenants} tenants, one {r.server} "
        f"process serving portal.asgi with the `live` channel layer ({r.layer}), the "
        "publisher process "
        "(`manage.py publish_live_metrics`) sending each tenant's numbers once a second. Every "
        "subscriber is a logged-in member of its tenant (session cookie, origin checked, "
        "LiveMetricsConsumer); the bench records two requests per tenant per second through the "
        "gateway's Recorder, so every message carries numbers. Delay: the publisher's `sent_at` "
        "stamp just before its group_send to the subscriber's clock on receipt (one machine).",
        "",
        "| measure | " + " | ".join(run.mode for run in runs) + " |",
        "|---|" + "---|" * len(runs),
        row("sockets connected", lambda run: str(run.connected)),
        row("window after the warm-up", lambda run: f"{run.seconds:.0f} s"),
        row("delay publish -> receipt p50", lambda run: f"{run.delay_p50_ms:.1f} ms"),
        row(f"delay p99 (goal < {GOAL_P99_MS:.0f} ms)", verdict),
        row("delay max", lambda run: f"{run.delay_max_ms:.1f} ms"),
        row(
            "messages received / expected",
            lambda run: f"{run.received} / {run.expected_messages}",
        ),
        row("most messages one socket got for one second", lambda r_: str(r_.most_in_one_second)),
        row("messages carrying another tenant's versions", lambda r_: str(r_.foreign_versions)),
        row(
            "portal ASGI process CPU per subscriber",
            lambda run: (
                f"{run.server_cpu_ms_per_subscriber_second:.3f} CPU-ms/s "
                f"({run.server_cpu_s:.1f} CPU-s in all)"
            ),
        ),
        row(
            "publisher CPU (all tenants)",
            lambda run: f"{1000 * run.publisher_cpu_s / run.seconds:.1f} CPU-ms/s",
        ),
        row("subscribers' client CPU (this bench process)", lambda r_: f"{r_.client_cpu_s:.1f} s"),
        row(
            "load average before / after",
            lambda run: f"{run.loadavg_before:.1f} / {run.loadavg_after:.1f}",
        ),
        "",
    ]
    lines += [f"- `{run.mode}`: {MODES[run.mode]}." for run in runs]
    lines += [f"- {note}" for note in r.notes]
    lines += ["", f"<!-- {SECTION}:end -->"]
    return "\n".join(lines) + "\n"


# --- the world ---


def seed(tenants: int, subscribers: int) -> list[tuple[str, str]]:
    """Tenants t00.., one viewer per subscriber (round robin over tenants); returns
    (tenant slug, session key) per subscriber."""
    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )
    from django.contrib.sessions.backends.db import SessionStore

    from tenants.models import Membership, Tenant

    user_model = get_user_model()
    slugs = [f"t{i:02d}" for i in range(tenants)]
    rows = {s: Tenant.objects.create(slug=s, name=f"Tenant {s}") for s in slugs}
    out = []
    for n in range(subscribers):
        slug = slugs[n % tenants]
        user = user_model.objects.create_user(username=f"s{n:04d}", password=PASSWORD)
        Membership.objects.create(user=user, tenant=rows[slug], role="viewer")
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.save()
        if session.session_key is None:
            raise RuntimeError(f"the session of {user.username} was not saved")
        out.append((slug, session.session_key))
    return out


async def feed(redis_url: str, slugs: list[str], stop: asyncio.Event, *, mode: str) -> None:
    """Two requests per tenant per second through the gateway's Recorder, flushed each second;
    and each second the access generation `mode` names moves (see MODES)."""
    from redis import asyncio as aioredis

    from gateway.recorder import Measurement, Recorder
    from portal.live_access import ACCESS_GENERATION_KEY, TENANT_GENERATIONS_KEY

    redis = aioredis.Redis.from_url(redis_url)
    recorder = Recorder(redis)
    try:
        while not stop.is_set():
            now = time.time()
            for i, slug in enumerate(slugs):
                for k, served in enumerate(("gpu", "cold")):
                    recorder.add(
                        Measurement(
                            tenant=slug,
                            tenant_id=i,
                            adapter="a",
                            version=f"a@{k + 1}",
                            version_id=None,
                            pool="",
                            served_name="",
                            engine="e",
                            served_from=served,
                            ok=True,
                            ttft_ms=12.0,
                            e2e_ms=30.0,
                            prompt_tokens=4,
                            completion_tokens=8,
                            load_ms=200.0 if served == "cold" else 0.0,
                            at=now,
                        )
                    )
            await recorder.flush()
            if mode == "every-message":
                await redis.incr(ACCESS_GENERATION_KEY)
            elif mode == "tenant-changes":
                await redis.hincrby(TENANT_GENERATIONS_KEY, slugs[int(now) % len(slugs)], 1)
            await asyncio.sleep(1.0)
    finally:
        await redis.aclose()


@dataclass
class Tally:
    delays: list[float] = field(default_factory=list)
    per_second: Counter[tuple[int, int]] = field(default_factory=Counter)
    foreign: int = 0
    connected: int = 0
    measuring: bool = False
    heard: set[int] = field(default_factory=set)  # subscribers that got a message yet


async def subscriber(
    n: int, url: str, origin: str, slug: str, session: str, tally: Tally, stop: asyncio.Event
) -> None:
    import websockets

    headers = {"Cookie": f"sessionid={session}", "Origin": origin}
    async with websockets.connect(
        url, additional_headers=headers, open_timeout=60, max_queue=None
    ) as ws:
        tally.connected += 1
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=1.0)
            except TimeoutError:
                continue
            received = time.time()
            message = json.loads(raw)
            tally.heard.add(n)
            if not tally.measuring:
                continue
            tally.delays.append(1000 * (received - message["sent_at"]))
            # Per publisher tick (the newest second it sent), not per second of arrival: a late
            # message and the next one may arrive within one second without a double send.
            tally.per_second[(n, message["points"][-1]["t"])] += 1
            for point in message["points"]:
                if point["versions"] and set(point["versions"]) - {"a@1", "a@2"}:
                    tally.foreign += 1
                    break


async def run_clients(
    args: argparse.Namespace, port: int, sessions: list[tuple[str, str]], pids, mode: str
) -> Run:
    stop = asyncio.Event()
    slugs = sorted({s for s, _ in sessions})
    feeder = asyncio.create_task(feed(os.environ["REDIS_URL"], slugs, stop, mode=mode))
    tally = Tally()
    origin = f"http://127.0.0.1:{port}"
    tasks = []
    for n, (slug, session) in enumerate(sessions):
        url = f"ws://127.0.0.1:{port}/ws/tenants/{slug}/metrics/"
        tasks.append(asyncio.create_task(subscriber(n, url, origin, slug, session, tally, stop)))
        if n % 25 == 24:
            await asyncio.sleep(0.05)  # connect in small batches, as browsers arrive
    deadline = time.monotonic() + 120
    while tally.connected < len(sessions) and time.monotonic() < deadline:
        failed = [t for t in tasks if t.done() and t.exception()]
        if failed:
            raise RuntimeError(f"a subscriber failed: {failed[0].exception()!r}")
        await asyncio.sleep(0.2)
    # The publisher starts beside the server: the warm-up begins once every socket has heard it.
    while len(tally.heard) < tally.connected and time.monotonic() < deadline + 60:
        await asyncio.sleep(0.2)
    await asyncio.sleep(args.warmup)
    load_before = os.getloadavg()[0]
    cpu_before = {name: gs.cpu_seconds(pid) for name, pid in pids.items()}
    client_before = time.process_time()
    tally.measuring = True
    started = time.monotonic()
    await asyncio.sleep(args.seconds)
    tally.measuring = False
    window = time.monotonic() - started
    cpu = {name: gs.cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    client_cpu = time.process_time() - client_before
    load_after = os.getloadavg()[0]
    stop.set()
    await asyncio.gather(feeder, *tasks, return_exceptions=True)
    if not tally.delays:
        raise RuntimeError("no message arrived; see the logs in " + str(VAR))
    p50, p99, worst = summarize_delays(tally.delays)
    return Run(
        mode=mode,
        seconds=window,
        connected=tally.connected,
        expected_messages=int(round(window)) * tally.connected,
        received=len(tally.delays),
        delay_p50_ms=p50,
        delay_p99_ms=p99,
        delay_max_ms=worst,
        most_in_one_second=max(tally.per_second.values()),
        foreign_versions=tally.foreign,
        server_cpu_s=cpu["server"],
        publisher_cpu_s=cpu["publisher"],
        client_cpu_s=client_cpu,
        loadavg_before=load_before,
        loadavg_after=load_after,
    )


def measure(args: argparse.Namespace, db_url: str, procs: list) -> Result:
    redis_url = os.environ.get("BENCH_LIVE_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys={})
    gs.django_setup(env, db_url)
    sessions = seed(args.tenants, args.subscribers)
    from django.db import connections

    connections.close_all()
    full_env = {**os.environ, **env}
    port = gs.free_port()
    if args.server == "daphne":
        cmd = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        cmd += ["portal.asgi:application"]
    else:
        cmd = [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1"]
        cmd += ["--port", str(port), *gs.PORTAL_UVICORN_OPTIONS]
    web_log = VAR / "web.log"
    web = gs.spawn(cmd, log=web_log, env=full_env)
    procs.append(web)
    gs.wait_http(f"http://127.0.0.1:{port}/login/", web, web_log)
    publisher = gs.spawn(
        [sys.executable, "manage.py", "publish_live_metrics"],
        log=VAR / "publisher.log",
        env=full_env,
    )
    procs.append(publisher)
    result = Result(
        server=args.server,
        subscribers=args.subscribers,
        tenants=args.tenants,
        machine=f"{platform.machine()}, {os.cpu_count()} cores",
        started=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        notes=[
            "The subscribers' client (every socket on one event loop in the bench process) "
            "shares the two cores with the portal and the publisher; its CPU is listed so the "
            "delays can be read against it.",
        ],
    )
    result.notes += args.note
    from django.conf import settings

    result.layer = str(settings.CHANNEL_LAYERS["live"]["BACKEND"])
    pids = {"server": web.pid, "publisher": publisher.pid}
    for mode in args.modes.split(","):
        result.runs.append(asyncio.run(run_clients(args, port, sessions, pids, mode)))
    return result


def command_line() -> str:
    """How to run it again: the arguments given, without the report's notes."""
    kept, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
        elif arg in ("--note", "--render-only"):
            skip = True
        elif not arg.startswith(("--note=", "--render-only=")):
            kept.append(arg)
    return " ".join([".venv/bin/python -m bench.live_fanout", *kept])


def load_result(path: Path) -> Result:
    raw = json.loads(path.read_text())
    raw["runs"] = [Run(**run) for run in raw["runs"]]
    return Result(**raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, default=500)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--modes",
        default="generation,tenant-changes,every-message",
        help="comma-separated, run in this order: " + ", ".join(MODES),
    )
    parser.add_argument("--note", action="append", default=[], help="a line for the report")
    parser.add_argument(
        "--render-only",
        type=Path,
        help="render (and with --write-docs, write) the report of an earlier run's result.json",
    )
    args = parser.parse_args()
    if args.render_only:
        result = load_result(args.render_only)
        section = render(result, command_line())
        print(section)
        if args.write_docs:
            write_section(SECTION, section)
        return
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        parser.error(
            f"unknown --modes {', '.join(sorted(unknown))}; choose from {', '.join(MODES)}"
        )

    from bench.list_versions import drop_database

    VAR.mkdir(parents=True, exist_ok=True)
    db_url = os.environ.get("BENCH_LIVE_DATABASE_URL", DEFAULT_DB_URL)
    procs: list = []
    try:
        with gs.sigterm_runs_cleanup():
            result = measure(args, db_url, procs)
    finally:
        for proc in reversed(procs):
            gs.stop_group(proc)
        if os.environ.get("DATABASE_URL") == db_url:  # measure() got as far as its database
            gs.flush_redis(os.environ["REDIS_URL"])
            if not args.keep_db:
                drop_database(db_url)
    (VAR / "result.json").write_text(json.dumps(asdict(result), indent=2))
    section = render(result, command_line())
    print(section)
    if args.write_docs:
        write_section(SECTION, section)


if __name__ == "__main__":
    main()
