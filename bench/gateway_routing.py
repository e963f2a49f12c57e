"""Engine choice on real engines: the gateway's cache-aware choice against round-robin.

    .venv/bin/python -m bench.gateway_routing [--requests 300] [--rates 1.5,4] [--adapters 16]
        [--zipf 1.1] [--seed 1] [--choices policy,round_robin] [--write-docs] [--keep-db]

Two CPU vLLM engines (engine.launcher, `--max-loras 2 --max-cpu-loras 3 --max-lora-rank 32`, the
portal plugin, a key each), one Celery worker (threads, on the shared queue and both node
queues: the fleet's single-flight cold loads and converge passes), 16 rank-8 adapters of one
tenant, each with one active version whose files sit in the serving store. One seeded trace:
N streaming chat requests (max_tokens 4), adapter drawn from Zipf(s) over the 16, sent open-loop
at Poisson arrival times (each of `--rates` per second in turn), replayed through the gateway
once per engine choice and rate, in the same run:

- `policy`: the gateway as deployed (workers.cache_policy.choose_engine: hot, then warm, then
  least loaded);
- `round_robin`: the same gateway with its engine choice replaced by a round robin
  (bench/round_robin_asgi.py).

Before each replay the fleet starts from nothing: every adapter evicted from both engines
(plugin), staged copies deleted, Residency rows deleted, the bench's Redis DB flushed and the
worker restarted (its demand trackers live in its memory). Each replay gets a fresh gateway
process. Cold loads are counted twice: the worker's FleetAction `load` rows in the replay's
window, and the gateway's own `cold` counter (requests that waited for a load). TTFT is measured
at the client (send -> first event carrying text), so it includes every wait.

Database: BENCH_GATEWAY_ROUTING_DATABASE_URL (default .../lora_portal_bench_gwroute; created,
dropped at the end unless --keep-db); Redis: BENCH_GATEWAY_ROUTING_REDIS_URL (default DB 11).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import gateway_support as gs
from bench.docs_section import add_report_arguments, markers, write_section
from engine.launcher import REPO_ROOT, EngineProcess, stop_engines

BEGIN, END = markers("gateway-routing")
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_gwroute"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
VAR = REPO_ROOT / "var" / "bench" / "gateway-routing"
QUEUE = "bench-gwroute"
ENGINE_NAMES = ("route-a", "route-b")
# The gateway each replay starts: the product, or the baseline with a round-robin engine choice.
GATEWAY_APPS = {
    "policy": "portal.asgi:application",
    "round_robin": "bench.round_robin_asgi:application",
}
MAX_LORAS, MAX_CPU_LORAS = 2, 3
PROMPT = "Tell me about tea."
MAX_TOKENS = 4
REQUEST_TIMEOUT_S = 180.0  # bounds a stuck request; nothing is judged by it
TAIL_S = 300.0  # after the last arrival, the longest a replay waits for its stragglers


# --- results and the arithmetic on them (tests/bench/test_gateway_bench_report.py) ---


@dataclass
class Replay:
    """One replay of the trace through one engine choice."""

    choice: str
    rate: float  # arrivals per second
    samples: list[gs.Sample]
    ranks: list[int]  # the adapter's popularity rank of each sample (0 = most popular)
    loads: int  # FleetAction load rows (ok) in the replay's window
    load_failures: int
    evictions: int  # FleetAction evict rows (ok) in the window
    load_ms: list[float]  # those loads' latencies
    served_from: dict[str, int]  # the gateway's counters: gpu / cpu / cold
    seconds: float
    load_average: float = 0.0  # the machine's 1-minute load average when the replay started

    @property
    def ttft(self) -> gs.Summary:
        return gs.summarize(self.samples, ttft=True)

    def ttft_for(self, ranks: set[int]) -> gs.Summary | None:
        picked = [s for s, r in zip(self.samples, self.ranks, strict=True) if r in ranks]
        good = [s for s in picked if s.ok and s.ttft_ms is not None]
        return gs.summarize(picked, ttft=True) if good else None


def change(ours: float, theirs: float) -> float:
    """Relative change of `ours` against `theirs` (-0.4 = 40% fewer)."""
    return (ours - theirs) / theirs if theirs else 0.0


@dataclass
class RoutingResult:
    replays: list[Replay]
    requests: int
    rates: list[float]
    adapters: int
    zipf: float
    seed: int
    top_share: float  # the most popular adapter's share of the trace
    distinct: int  # adapters the trace names at least once
    machine: str
    seconds: float
    engine_start_s: list[float]
    notes: list[str] = field(default_factory=list)
    auto_pins: bool = False

    def replay(self, choice: str, rate: float) -> Replay | None:
        return next((r for r in self.replays if r.choice == choice and r.rate == rate), None)


def _ms(summary: gs.Summary | None, attr: str) -> str:
    return "-" if summary is None else f"{getattr(summary, attr):.0f}"


def _table(r: RoutingResult) -> list[str]:
    head = max(1, r.adapters // 8)  # the two most popular of 16
    lines = [
        "| arrivals /s | engine choice | requests ok (failed) | cold loads (FleetAction) | failed loads | "
        "evictions | gateway: gpu / cpu / cold | load p50 ms | TTFT p50 ms | **TTFT p99 ms** "
        f"| TTFT p99, top {head} adapters ms | TTFT p99, the rest ms | replay s | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in r.replays:
        t = p.ttft
        top, rest = p.ttft_for(set(range(head))), p.ttft_for(set(range(head, r.adapters)))
        load_p50 = f"{gs.percentile(p.load_ms, 0.5):.0f}" if p.load_ms else "-"
        sf = p.served_from
        lines.append(
            f"| {p.rate:g} | {p.choice} | {t.n} ({t.errors}) | **{p.loads}** | {p.load_failures} | "
            f"{p.evictions} | {sf.get('gpu', 0)} / {sf.get('cpu', 0)} / {sf.get('cold', 0)} | "
            f"{load_p50} | {t.p50:.0f} | **{t.p99:.0f}** | {_ms(top, 'p99')} | "
            f"{_ms(rest, 'p99')} | {p.seconds:.0f} | {p.load_average:.1f} |"
        )
    return lines


def _comparison(r: RoutingResult) -> list[str]:
    lines = []
    for rate in r.rates:
        ours, base = r.replay("policy", rate), r.replay("round_robin", rate)
        if ours is None or base is None:
            continue
        lines.append(
            f"- {rate:g}/s, policy against round-robin: cold loads {ours.loads} vs {base.loads} "
            f"({change(ours.loads, base.loads) * 100:+.0f}%), TTFT p99 {ours.ttft.p99:.0f} vs "
            f"{base.ttft.p99:.0f} ms ({change(ours.ttft.p99, base.ttft.p99) * 100:+.0f}%), TTFT "
            f"p50 {ours.ttft.p50:.0f} vs {base.ttft.p50:.0f} ms, failed requests "
            f"{ours.ttft.errors} vs {base.ttft.errors}."
        )
    return lines


def failure_reasons(samples: list[gs.Sample]) -> dict[str, int]:
    """Failed requests by the gateway's error code (or the client's error)."""
    import re

    out: dict[str, int] = {}
    for s in samples:
        if s.ok:
            continue
        found = re.search(r'"code":\s*"([^"]+)"', s.error)
        reason = found.group(1) if found else (s.error[:40] or str(s.status))
        out[reason] = out.get(reason, 0) + 1
    return out


FAILURE_NOTE = [
    "What the failures are (read in gateway/app.py and the logs of the run): "
    "`adapter_load_failed` is the controller refusing a load on every engine the request could "
    "use, because every other GPU slot was serving requests or the cache was full of versions "
    "it may not evict (none with requests in flight), and the gateway answering 503 at once "
    "rather than waiting for a slot to free. `engine_unavailable` would be an engine that "
    "failed before the first byte with no other engine left (a 404 for an adapter the table "
    "placed there is not one: the gateway loads it again, up to twice).",
]


def _failures(r: RoutingResult) -> list[str]:
    lines = []
    for p in r.replays:
        reasons = failure_reasons(p.samples)
        if reasons:
            lines.append(
                f"- Failed at {p.rate:g}/s, {p.choice}: "
                + ", ".join(f"{n} `{code}`" for code, n in sorted(reasons.items()))
                + "."
            )
    return [*lines, "", *FAILURE_NOTE] if lines else []


def render(r: RoutingResult, command: str) -> str:
    lines = [
        BEGIN,
        "## Gateway engine choice on real engines: cache-aware policy against round-robin",
        "",
        f"Command (one run produces every number below): `{command}`",
        "",
        f"Machine: {r.machine}; Python {platform.python_version()}. Two CPU vLLM 0.32 engines "
        f"(tiny Llama, float32, `--max-loras {MAX_LORAS} --max-cpu-loras {MAX_CPU_LORAS}`, "
        "portal plugin; ready after "
        + ", ".join(f"{s:.0f}" for s in r.engine_start_s)
        + " s), one Celery worker (threads, 4) on the shared and both node queues, no beat, "
        + (
            "FLEET_AUTO_PINS on (as deployed; the gateway holds back a request that would put "
            "more unpinned adapters in a batch than there are unpinned slots: see the note "
            "below); "
            if r.auto_pins
            else "FLEET_AUTO_PINS off (see the note below); "
        )
        + "the gateway (portal.asgi, one uvicorn process) fresh for each replay; PostgreSQL and "
        f"Redis on loopback. Run took {r.seconds:.0f} s.",
        "",
        f"Trace (seed {r.seed}): {r.requests} streaming chat requests (max_tokens {MAX_TOKENS}) "
        f"over {r.adapters} rank-8 adapters of one tenant, Zipf s={r.zipf:g} (the most popular "
        f"adapter {r.top_share * 100:.0f}% of requests; {r.distinct} adapters named), open-loop "
        f"Poisson arrivals at " + " and ".join(f"{x:g}/s" for x in r.rates) + ", the same "
        "trace for every replay of a rate. Before each replay "
        "every adapter is evicted from both engines, staged copies and Residency rows deleted, "
        "Redis flushed and the worker restarted; the second rate replays the choices in reverse "
        "order (ABBA), and the last column is the machine's load average as each replay "
        "started (other tests on the machine share it). Cold loads: the worker's FleetAction `load` "
        "rows in the replay (stage + verified load); the gateway's counters say where each "
        "request was served from (cold = it waited for a load). TTFT at the client (send -> "
        "first event carrying text), p99 by nearest rank.",
        "",
        *_table(r),
        "",
        *_comparison(r),
        "",
        *_failures(r),
    ]
    lines += ["", *PIN_NOTE]
    if r.notes:
        lines += ["", *r.notes]
    lines.append(END)
    return "\n".join(lines) + "\n"


PIN_NOTE = [
    "Pins and vLLM's batches: in the first try of this bench (auto-pins on, before the "
    "gateway's guard) both engines' cores died within seconds of the first requests, "
    "`KeyError` in vLLM's `punica_wrapper/utils.py convert_mapping`. Reproduced alone: "
    "`--max-loras 2`, three adapters loaded, one pinned through the plugin (`POST "
    "/portal/pin`), then 16 concurrent requests for the two others -> every request 500 and "
    "the engine gone; the same without the pin -> all 200. vLLM's scheduler admits up to "
    "max_loras distinct adapters per batch without counting pinned ones; activating the "
    "batch's second adapter evicts its first from the only unpinned GPU slot. The gateway "
    "now admits at most max_loras - pins distinct unpinned adapters on an engine with pins at "
    "once (gateway.limits, atomic in Redis across replicas); the others wait at the gateway. "
    "Since commit 7201ab1 (2026-12-01) it reads the pins from the engine's pinned set in Redis, which the "
    "controller fills before the engine pins, only when the requests in flight leave room "
    "(workers.engine_slots), not from its tables, which lagged the controller.",
]


# --- the world ---


@dataclass
class Services:
    engines: dict[str, EngineProcess] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    worker: Any = None
    gateway: Any = None

    def start_engines(self, tiny: Path) -> None:
        self.engines, self.keys = gs.start_engines(
            tiny, VAR, ENGINE_NAMES, max_loras=MAX_LORAS, max_cpu_loras=MAX_CPU_LORAS
        )

    def start_worker(self, env: dict[str, str]) -> None:
        self.worker = gs.start_worker(QUEUE, ENGINE_NAMES, VAR / "worker.log", env)

    def stop_all(self) -> None:
        gs.stop_group(self.gateway)
        gs.stop_group(self.worker)
        stop_engines(list(self.engines.values()))


def seed_world(services: Services, tiny: Path, n: int) -> tuple[gs.Tenancy, list[str]]:
    """The tenant, both engine rows and n adapters (one active version each); their names."""
    from adapters.models import Adapter
    from tests.workers.fleet import servable_version

    tenancy = gs.seed_tenancy(tiny)
    for name, proc in services.engines.items():
        gs.engine_row(name, proc, tenancy.base)
    names = []
    for i in range(n):
        adapter = Adapter.objects.create(
            tenant=tenancy.tenant,
            name=f"a{i:02d}",
            base_model=tenancy.base,
            max_concurrent_requests=64,
        )
        servable_version(adapter, VAR / "src", seed=100 + i)
        names.append(adapter.name)
    return tenancy, names


async def _empty_engine(proc: EngineProcess, key: str) -> None:
    from workers.vllm_client import VLLMClient

    async with VLLMClient(proc.base_url, engine_key=key) as client:
        for entry in (await client.residency()).get("registered", []):
            await client.evict(entry["name"])
        for lora_id in (await client.residency()).get("orphaned_ids", []):
            await client.evict(lora_int_id=lora_id)


def engine_post_mortem(name: str, proc: EngineProcess) -> str:
    """Why an engine stopped answering, from what is left: its process's exit (a signal 9 with
    no error in its log is the kernel's OOM killer; an EngineDeadError in the log is vLLM's
    engine core dying) and its log's last lines. A run on 2026-12-01 lost an engine here with no
    trace of which."""
    code = proc.process.poll() if proc.process is not None else None
    state = "still running (not answering)" if code is None else f"exited with {code}"
    log = Path(proc.config.log_path or "")
    tail = log.read_text(errors="replace")[-3000:] if log.is_file() else "(no log)"
    return f"engine {name} did not answer: its process {state}. Last lines of {log}:\n{tail}"


def reset_fleet(services: Services, env: dict[str, str]) -> None:
    """Every replay starts from nothing: engines, node disks, Residency rows, Redis, worker."""
    from workers.models import Residency

    gs.stop_group(services.worker)
    for name, proc in services.engines.items():
        try:
            asyncio.run(_empty_engine(proc, services.keys[name]))
        except Exception as exc:
            raise RuntimeError(engine_post_mortem(name, proc)) from exc
        root = Path(proc.config.adapter_root or "")
        for child in root.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    Residency.objects.all().delete()
    gs.flush_redis(env["REDIS_URL"])
    services.start_worker(env)


def gateway_counters(redis_url: str) -> dict[str, int]:
    """Requests served from gpu / cpu / cold, summed over versions (lp:gwm:counters)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        fields = client.hgetall("lp:gwm:counters")
    finally:
        client.close()
    out: dict[str, int] = {}
    for key, value in fields.items():
        what = (key.decode() if isinstance(key, bytes) else key).rsplit("|", 1)[-1]
        if what in ("gpu", "cpu", "cold"):
            out[what] = out.get(what, 0) + int(value)
    return out


def fleet_actions(since: float) -> tuple[int, int, int, list[float]]:
    """(loads ok, loads failed, evictions + unloads ok, load latencies ms) since `since` (epoch s)."""
    from workers.models import FleetAction

    rows = FleetAction.objects.filter(created_at__gte=datetime.fromtimestamp(since, UTC))
    loads = list(rows.filter(kind="load", ok=True).values_list("latency_ms", flat=True))
    failed = rows.filter(kind="load", ok=False).count()
    evictions = rows.filter(kind__in=("evict", "unload"), ok=True).count()
    return len(loads), failed, evictions, [ms for ms in loads if ms is not None]


async def replay_trace(
    target: gs.Target, adapters: list[int], arrivals: list[float], names: list[str]
) -> list[gs.Sample]:
    """Open loop: request i leaves at arrivals[i] whatever happened to the others."""
    bodies = {
        rank: gs.request_body(
            gs.Target(target.name, target.base_url, names[rank], target.headers),
            chat=True,
            stream=True,
            max_tokens=MAX_TOKENS,
            text=PROMPT,
        )
        for rank in set(adapters)
    }
    async with gs.new_client(concurrency=len(adapters), timeout=REQUEST_TIMEOUT_S) as client:
        started = time.perf_counter()

        async def one(at: float, rank: int) -> gs.Sample:
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - started)))
            return await gs.send_one(client, target, chat=True, stream=True, body=bodies[rank])

        tasks = [
            asyncio.create_task(one(at, rank)) for at, rank in zip(arrivals, adapters, strict=True)
        ]
        done, pending = await asyncio.wait(tasks, timeout=arrivals[-1] + TAIL_S)
        for task in pending:
            task.cancel()
        return [
            t.result() if t in done else gs.Sample(False, 0, 0.0, error="replay deadline")
            for t in tasks
        ]


def run_replay(
    choice: str,
    rate: float,
    services: Services,
    env: dict[str, str],
    tenancy: gs.Tenancy,
    names: list[str],
    trace: tuple[list[int], list[float]],
) -> Replay:
    reset_fleet(services, env)
    services.gateway, url = gs.start_gateway(
        env,
        VAR / f"gateway-{choice}-{rate:g}.log",
        cpus=None,
        app=GATEWAY_APPS[choice],
    )
    target = gs.Target(choice, url, "", {"authorization": f"Bearer {tenancy.token}"})
    adapters, arrivals = trace
    load_average = os.getloadavg()[0]
    started = time.time()
    samples = asyncio.run(replay_trace(target, adapters, arrivals, names))
    seconds = time.time() - started
    time.sleep(2.5)  # the gateway flushes its counters once a second
    loads, failed, evictions, load_ms = fleet_actions(started)
    counters = gateway_counters(env["REDIS_URL"])
    gs.stop_group(services.gateway)
    services.gateway = None
    errors = [s.error for s in samples if not s.ok]
    if errors:
        print(f"{choice} at {rate:g}/s: {len(errors)} failed requests, e.g. {errors[:3]}")
    return Replay(
        choice,
        rate,
        samples,
        adapters,
        loads,
        failed,
        evictions,
        load_ms,
        counters,
        seconds,
        load_average,
    )


def replay_order(choices: list[str], i: int) -> list[str]:
    """ABBA: the second rate replays the choices in reverse, so a machine whose load drifts
    during the run favours neither choice."""
    return list(choices) if i % 2 == 0 else list(reversed(choices))


def measure(args: argparse.Namespace, services: Services, db_url: str) -> RoutingResult:
    started, load_before = time.time(), os.getloadavg()[0]
    tiny = gs.tiny_model()
    services.start_engines(tiny)
    redis_url = os.environ.get("BENCH_GATEWAY_ROUTING_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys=services.keys)
    env.update({"CELERY_TASK_DEFAULT_QUEUE": QUEUE, "ENGINE_QUEUE_PREFIX": f"{QUEUE}.node."})
    # With --max-loras 2, one adapter pinned in a GPU slot and a batch holding two other
    # adapters, vLLM 0.32's engine core dies (KeyError in punica convert_mapping: activating the
    # second evicts the first from the one unpinned slot). The gateway's admission now holds
    # such requests back (gateway.limits), so auto-pins run as deployed unless --no-auto-pins.
    env["FLEET_AUTO_PINS"] = "1" if args.auto_pins else "0"
    gs.django_setup(env, db_url)
    tenancy, names = seed_world(services, tiny, args.adapters)
    engine_start_s = [p.wait_ready(timeout=gs.READY_TIMEOUT_S) for p in services.engines.values()]
    adapters = gs.zipf_trace(args.requests, args.adapters, args.zipf, args.seed)
    rates = [float(x) for x in args.rates.split(",")]
    choices = args.choices.split(",")
    replays = [
        run_replay(
            choice,
            rate,
            services,
            env,
            tenancy,
            names,
            (adapters, gs.poisson_arrivals(args.requests, rate, args.seed)),
        )
        for i, rate in enumerate(rates)
        for choice in replay_order(choices, i)
    ]
    return RoutingResult(
        replays=replays,
        requests=args.requests,
        rates=rates,
        adapters=args.adapters,
        zipf=args.zipf,
        seed=args.seed,
        top_share=adapters.count(0) / len(adapters),
        distinct=len(set(adapters)),
        machine=gs.machine_note(load_before, list(services.engines.values())),
        seconds=time.time() - started,
        engine_start_s=engine_start_s,
        notes=list(args.note),
        auto_pins=args.auto_pins,
    )


def load_result(var: Path) -> RoutingResult:
    """The last run's result.json as a RoutingResult."""
    data = json.loads((var / "result.json").read_text())
    data["replays"] = [
        Replay(**{**row, "samples": [gs.Sample(**x) for x in row["samples"]]})
        for row in data["replays"]
    ]
    return RoutingResult(**data)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rates", default="1.5,4", help="arrivals per second, one run each")
    parser.add_argument("--adapters", type=int, default=16)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--choices", default="policy,round_robin")
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
        result.notes += args.note
        section = render(result, args.render_only)
        print(section)
        if args.write_docs:
            write_section("gateway-routing", section)
        return

    db_url = os.environ.get("BENCH_GATEWAY_ROUTING_DATABASE_URL", DEFAULT_DB_URL)
    services = Services()
    result = gs.measure_and_save(
        VAR, db_url, args.keep_db, services, lambda: measure(args, services, db_url)
    )
    section = render(result, " ".join([".venv/bin/python -m bench.gateway_routing", *sys.argv[1:]]))
    print(section)
    if args.write_docs:
        write_section("gateway-routing", section)


if __name__ == "__main__":
    main()
