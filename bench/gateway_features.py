"""The gateway with every feature on, against the engine itself, service classes on and off in one
run (issue 46): what the gateway adds, what the classes cost when no engine is saturated, and its
CPU per request.

    .venv/bin/python -m bench.gateway_overhead --features [--requests 1000] [--warmup 30]
        [--load-requests 500] [--stub-requests 5000] [--concurrency 16] [--engine-cpus 0]
        [--profile] [--write-docs] [--before PATH]

Two gateways (each portal.asgi under one uvicorn process on core 1, as bench.gateway_overhead
runs one) serve the same tenant (class silver), inference token and alias `support-bot`, under
a budget on every scope the request has (the tenant's, the token's, the alias's), with the live
headroom and lanes at their defaults, tracing off: `gateway` with service classes on (the
default) and `classes off` (GATEWAY_SERVICE_CLASSES=0). Latency: one request at a time, the
engine itself and the two gateways in send_order, each kind (bench.gateway_overhead's four);
added = a gateway's percentile minus the engine's own; the classes' cost = the p50 with classes
on minus the p50 with them off. CPU per request: non-streaming chat at concurrency 16 through
the stub engine (the gateway is the bottleneck), each gateway twice in the order A B B A, its
utime + stime over the run. `--profile`: the classes-on gateway again under cProfile, its
breakdown beside the one recorded on 2026-12-03 (docs/benchmarks.md, "Gateway overhead").
`--before PATH`: a third gateway, `before`, runs the code of PATH (a checkout of an earlier
commit: `git archive <commit> | tar -x -C PATH`) with every feature on, in the same rounds: the
change against the code before it, on the same engine at the same moments.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import uvloop

from bench import gateway_support as gs
from bench.docs_section import markers
from engine.launcher import REPO_ROOT, EngineProcess

BEGIN, END = markers("gateway-overhead-features")
VAR = REPO_ROOT / "var" / "bench" / "gateway-features"
ARMS = {"gateway": {}, "classes off": {"GATEWAY_SERVICE_CLASSES": "0"}}
GOAL_ADDED_P50_MS, GOAL_ADDED_P99_MS = 1.0, 3.0
GOAL_CPU_MS = 0.45
GOAL_CLASSES_P50_MS = 0.1
# The profile recorded on 2026-12-03 (commit 9794106, docs/benchmarks.md "Where the gateway's
# CPU goes"): part -> (share of the process's CPU, ~ms per request unprofiled); 0.438 ms a request.
EARLIER_DATE, EARLIER_CPU_MS = "2026-12-03", 0.438
EARLIER = {
    "outside requests: event loop, socket I/O, HTTP parsing": (0.35, 0.15),
    "whole request (uvicorn run_asgi)": (0.61, 0.27),
    "gateway (Gateway.__call__)": (0.60, 0.26),
    "- caller: token, tables (re-read only after a change)": (0.02, 0.01),
    "- read_body + orjson": (0.01, 0.00),
    "- limits admit: rate, concurrency, engine in-flight (one EVALSHA)": (0.05, 0.02),
    "- limits release: all given back (one EVALSHA)": (0.05, 0.02),
    "- choose: engine choice": (0.03, 0.01),
    "- forward: engine round trip and relay": (0.32, 0.14),
    "-- aiohttp request (request, reply head)": (0.11, 0.05),
    "-- aiohttp read (reply body)": (0.02, 0.01),
    "-- recorder.add (measurement)": (0.03, 0.01),
    "Redis commands (EVALSHA, and MGET after a change)": (0.00, 0.00),
    "recorder.flush (once a second, background)": (0.05, 0.02),
}


@dataclass
class FeaturesResult:
    latency: dict[str, dict[str, gs.Summary]]  # kind -> target -> summary (ms)
    paired: dict[str, dict[str, float]]  # kind -> gateway -> median added per round (ms)
    cpu: dict[str, list[float]]  # gateway -> CPU ms per request, each stub run
    rps: dict[str, list[float]]  # gateway -> requests per second, each stub run
    engine_rps: dict[str, float]  # gateway -> requests per second through the real engine
    requests: int
    load_requests: int
    stub_requests: int
    concurrency: int
    machine: str = ""
    seconds: float = 0.0
    engine_cpus: str = ""
    # (part, profiled share of the process's CPU, ~ms per request unprofiled), if profiled
    parts: list[tuple[str, float, float]] = field(default_factory=list)
    top: list[str] = field(default_factory=list)  # the profile's top functions by own time
    before: str = ""  # the commit the `before` gateway ran (--before), if any
    # gateway -> CPU ms per request through the real engine at c=16 (not saturated: the fixed
    # costs of a replica's background loops spread over fewer requests)
    engine_cpu: dict[str, float] = field(default_factory=dict)

    def added(self, kind: str, target: str) -> tuple[float, float]:
        row, direct = self.latency[kind][target], self.latency[kind]["direct"]
        return row.p50 - direct.p50, row.p99 - direct.p99

    def classes_cost(self, kind: str) -> float:
        """What classes on added to the p50 over classes off, in ms."""
        return self.latency[kind]["gateway"].p50 - self.latency[kind]["classes off"].p50

    def cpu_ms(self, target: str) -> float:
        return statistics.median(self.cpu[target])

    def goals(self) -> list[tuple[str, str, bool]]:
        """(goal, measured, met): every kind must meet the latency goals."""
        kinds = list(self.latency)
        p50 = {k: self.added(k, "gateway")[0] for k in kinds}
        p99 = {k: self.added(k, "gateway")[1] for k in kinds}
        cost = {k: self.classes_cost(k) for k in kinds}
        worst50, worst99, worst_cost = (max(d, key=d.__getitem__) for d in (p50, p99, cost))
        cpu = self.cpu_ms("gateway")
        return [
            (
                f"added p50 < {GOAL_ADDED_P50_MS:g} ms, every kind (every feature on)",
                f"worst {p50[worst50]:+.2f} ms ({worst50})",
                all(v < GOAL_ADDED_P50_MS for v in p50.values()),
            ),
            (
                f"added p99 < {GOAL_ADDED_P99_MS:g} ms, every kind",
                f"worst {p99[worst99]:+.2f} ms ({worst99})",
                all(v < GOAL_ADDED_P99_MS for v in p99.values()),
            ),
            (
                f"gateway CPU per request <= {GOAL_CPU_MS:g} ms (stub engine, saturated)",
                f"{cpu:.3f} ms",
                cpu <= GOAL_CPU_MS,
            ),
            (
                f"service classes cost <= +{GOAL_CLASSES_P50_MS:g} ms p50 (on against off, "
                "no engine saturated), every kind",
                f"worst {cost[worst_cost]:+.2f} ms ({worst_cost})",
                all(v <= GOAL_CLASSES_P50_MS for v in cost.values()),
            ),
        ]


def render(r: FeaturesResult, command: str) -> str:
    lines = [
        BEGIN,
        "## Gateway overhead with every feature on; service classes on and off (issue 46)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {r.machine}. Run: {r.seconds:.0f} s. One CPU vLLM engine (the tiny Llama, "
        "`--scheduling-policy priority`) with a rank-8 adapter resident"
        + (f", its whole process tree under `taskset -c {r.engine_cpus}`" if r.engine_cpus else "")
        + "; two gateways (portal.asgi, one uvicorn process each, `taskset -c 1`), both with a "
        "budget on every scope (tenant, token, alias `support-bot`: each request reserves in the "
        "admission script and settles after), the live headroom and lanes, tracing off: "
        "`gateway` with service classes on (the tenant is silver), `classes off` "
        "(`GATEWAY_SERVICE_CLASSES=0`). Latency: "
        f"{r.requests} requests per target and kind, one at a time, in send_order, the load "
        "generator on the gateways' core; CPU: non-streaming chat at "
        f"c={r.concurrency} through the stub engine, {r.stub_requests} requests per run, each "
        "gateway twice (A B B A), the gateway's utime + stime over the run (the median of its "
        "two runs).",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        *[f"| {goal} | {value} | {'yes' if ok else 'NO'} |" for goal, value, ok in r.goals()],
        "",
        "Latency, ms (p99 is the nearest rank; added = the gateway's percentile minus the "
        "engine's own; per request = the median over rounds of each request minus the engine's "
        "request of its round; classes' cost = classes on minus off, p50):",
        "",
        "| kind | engine p50 / p99 | gateway p50 / p99 | adds p50 / p99 | adds per request | "
        "classes off p50 / p99 | adds p50 / p99 | classes' cost p50 | errors (e/g/off) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, per in r.latency.items():
        on, off = r.added(kind, "gateway"), r.added(kind, "classes off")
        paired = r.paired.get(kind, {}).get("gateway")
        lines.append(
            f"| {kind} | {per['direct'].p50:.2f} / {per['direct'].p99:.2f} | "
            f"{per['gateway'].p50:.2f} / {per['gateway'].p99:.2f} | "
            f"**{on[0]:+.2f} / {on[1]:+.2f}** | "
            f"{'-' if paired is None else f'{paired:+.2f}'} | "
            f"{per['classes off'].p50:.2f} / {per['classes off'].p99:.2f} | "
            f"{off[0]:+.2f} / {off[1]:+.2f} | {r.classes_cost(kind):+.2f} | "
            f"{per['direct'].errors}/{per['gateway'].errors}/{per['classes off'].errors} |"
        )
    lines += [
        "",
        "CPU per request through the stub engine (each run), and requests per second:",
        "",
        "| gateway | CPU ms / request, each run | median | stub req/s, each run | "
        f"real engine req/s (c={r.concurrency}) | CPU ms / request, real engine |",
        "|---|---|---|---|---|---|",
    ]
    for name in r.cpu:
        runs = ", ".join(f"{v:.3f}" for v in r.cpu[name])
        rates = ", ".join(f"{v:.0f}" for v in r.rps[name])
        lines.append(
            f"| {name} | {runs} | **{r.cpu_ms(name):.3f}** | {rates} | "
            f"{r.engine_rps.get(name, 0.0):.0f} | {r.engine_cpu.get(name, 0.0):.3f} |"
        )
    if "before" in r.cpu:
        lines += [
            "",
            f"The change against the code before it (`before`: commit {r.before}, every feature "
            "on, the same rounds), ms:",
            "",
            "| kind | before adds p50 / p99 | now adds p50 / p99 | p50 won back |",
            "|---|---|---|---|",
        ]
        for kind in r.latency:
            old, new = r.added(kind, "before"), r.added(kind, "gateway")
            lines.append(
                f"| {kind} | {old[0]:+.2f} / {old[1]:+.2f} | {new[0]:+.2f} / {new[1]:+.2f} | "
                f"{old[0] - new[0]:+.2f} |"
            )
        lines.append(
            f"| CPU ms / request (stub) | {r.cpu_ms('before'):.3f} | {r.cpu_ms('gateway'):.3f} | "
            f"{r.cpu_ms('before') - r.cpu_ms('gateway'):+.3f} |"
        )
    if r.parts:
        lines += [
            "",
            f"Where the classes-on gateway's CPU goes (cProfile, the stub run again), beside the "
            f"profile of {EARLIER_DATE} ({EARLIER_CPU_MS} ms a request, no budgets, no classes, "
            "no headroom or lanes); ~ms = the part's share of the profile times the unprofiled "
            "CPU per request (an estimate):",
            "",
            f"| part | {EARLIER_DATE} share | {EARLIER_DATE} ~ms | now share | now ~ms |",
            "|---|---|---|---|---|",
        ]
        for label, share, ms in r.parts:
            earlier = EARLIER.get(label)
            was = f"{earlier[0] * 100:.0f}% | {earlier[1]:.2f}" if earlier else "- | -"
            lines.append(f"| {label} | {was} | {share * 100:.0f}% | {ms:.2f} |")
        lines += [
            "",
            "Top functions by own time (profiled seconds; calls count coroutine resumptions):",
            "",
            "```",
            *r.top,
            "```",
        ]
    lines.append(END)
    return "\n".join(lines) + "\n"


def profile_parts(prof: Path, cpu_ms: float) -> tuple[list[tuple[str, float, float]], list[str]]:
    """The breakdown of bench.gateway_overhead's PROFILE_PARTS (share, ~ms) and the top lines."""
    import pstats

    from bench.gateway_overhead import PROFILE_PARTS, profile_report

    stats = pstats.Stats(str(prof))
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    total: float = stats.total_tt  # type: ignore[attr-defined]

    def cumulative(suffix: str, function: str) -> float:
        return sum(
            row[3]
            for (path, _line, name), row in raw.items()
            if name == function and path.endswith(suffix)
        )

    measured = [(label, cumulative(suffix, fn)) for label, suffix, fn in PROFILE_PARTS]
    inside = measured[0][1] + measured[-1][1]  # requests, and the background flush
    rows = [("outside requests: event loop, socket I/O, HTTP parsing", total - inside)]
    rows += measured
    parts = [(label, s / total, s / total * cpu_ms) for label, s in rows]
    report = profile_report(prof, 0, cpu_ms)
    fence = [i for i, line in enumerate(report) if line == "```"]
    top = report[fence[0] + 1 : fence[1]] if len(fence) >= 2 else []
    return parts, top


def stub_cpu(
    targets: dict[str, gs.Target], pids: dict[str, int], args: argparse.Namespace
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each gateway through the stub, A B B A: CPU ms per request and requests per second."""
    from bench.gateway_overhead import LOADGEN_CPUS, measure_throughput

    cpu: dict[str, list[float]] = {name: [] for name in pids}
    rps: dict[str, list[float]] = {name: [] for name in pids}
    order = [*pids, *reversed(pids)]
    with gs.pinned_to(LOADGEN_CPUS):
        for name in order:
            run = uvloop.run(
                measure_throughput(
                    targets[name],
                    pids[name],
                    upstream="stub",
                    count=args.stub_requests,
                    concurrency=args.concurrency,
                )
            )
            cpu[name].append(run.cpu_ms_per_request or 0.0)
            rps[name].append(run.rps)
    return cpu, rps


def measure_features(args: argparse.Namespace, services: Any, db_url: str) -> FeaturesResult:
    from bench.gateway_overhead import (
        KINDS,
        LOADGEN_CPUS,
        PROXY_CPUS,
        STUB_CPUS,
        measure_latency,
        measure_throughput,
        paired_added,
        point_engine_row,
        profile_gateway,
        seed_budgets,
    )

    started, load_before = time.time(), os.getloadavg()[0]
    tiny = gs.tiny_model()
    key = secrets.token_hex(16)
    config = gs.engine_config(
        tiny, VAR, "engine", key, max_loras=2, max_cpu_loras=3, cpu_cores=args.engine_cpus or None
    )
    services.engine = EngineProcess(config).start()
    redis_url = os.environ.get("BENCH_GATEWAY_REDIS_URL", "redis://127.0.0.1:6379/12")
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys={"bench-engine": key})
    gs.django_setup(env, db_url)
    tenancy = gs.seed_tenancy(tiny)
    services.engine.wait_ready(timeout=gs.READY_TIMEOUT_S)
    version = gs.seed_resident_adapter(
        services.engine, key, tenancy, VAR, max_concurrent_requests=64
    )
    model = seed_budgets(tenancy)
    services.stub, stub_url = gs.start_stub(VAR / "stub.log", cpus=STUB_CPUS)
    auth = {"authorization": f"Bearer {tenancy.token}"}
    # The engine's key as a bearer token: engines run with vLLM's --api-key (VLLM_API_KEY).
    engine_auth = {"authorization": f"Bearer {key}"}
    targets = {
        "direct": gs.Target("direct", services.engine.base_url, version.served_name, engine_auth)
    }
    pids: dict[str, int] = {}
    services.gateways = []
    arms = {name: (REPO_ROOT, extra) for name, extra in ARMS.items()}
    if args.before:
        arms["before"] = (Path(args.before).resolve(), {})
    for name, (tree, extra) in arms.items():
        log = VAR / f"gateway-{name.replace(' ', '-')}.log"
        proc, url = start_gateway_of(tree, env, log, extra)
        services.gateways.append(proc)
        targets[name] = gs.Target(name, url, model, auth)
        pids[name] = proc.pid
    latency_cpus = {int(PROXY_CPUS)} if args.engine_cpus else LOADGEN_CPUS
    with gs.pinned_to(latency_cpus):
        raw = uvloop.run(
            measure_latency(targets, requests=args.requests, warmup=args.warmup, gap_ms=0.0)
        )
    latency = {
        label: {name: gs.summarize(samples, ttft=stream) for name, samples in raw[label].items()}
        for label, _chat, stream, _n in KINDS
    }
    paired = {
        label: {
            name: value
            for name in arms
            if (value := paired_added(raw[label]["direct"], raw[label][name], ttft=stream))
            is not None
        }
        for label, _chat, stream, _n in KINDS
    }
    engine_rps: dict[str, float] = {}
    engine_cpu: dict[str, float] = {}
    with gs.pinned_to(LOADGEN_CPUS):
        for name in arms:
            run = uvloop.run(
                measure_throughput(
                    targets[name],
                    pids[name],
                    upstream="engine",
                    count=args.load_requests,
                    concurrency=args.concurrency,
                )
            )
            engine_rps[name] = run.rps
            engine_cpu[name] = run.cpu_ms_per_request or 0.0
    point_engine_row("bench-engine", stub_url)
    cpu, rps = stub_cpu(targets, pids, args)
    result = FeaturesResult(
        latency=latency,
        paired=paired,
        cpu=cpu,
        rps=rps,
        engine_rps=engine_rps,
        requests=args.requests,
        load_requests=args.load_requests,
        stub_requests=args.stub_requests,
        concurrency=args.concurrency,
        engine_cpus=args.engine_cpus,
        before=tree_commit(Path(args.before)) if args.before else "",
        engine_cpu=engine_cpu,
    )
    if args.profile:
        from bench import gateway_overhead as go

        go.VAR.mkdir(parents=True, exist_ok=True)
        try:
            profile_gateway(services, env, targets["gateway"], args, result.cpu_ms("gateway"))
            result.parts, result.top = profile_parts(
                go.VAR / "gateway.prof", result.cpu_ms("gateway")
            )
        except Exception as exc:  # noqa: BLE001 - the measurements above still stand
            result.top = [f"(profiling failed: {exc!r})"]
    point_engine_row("bench-engine", services.engine.base_url)
    result.machine = gs.machine_note(load_before, [services.engine])
    result.seconds = time.time() - started
    return result


def start_gateway_of(
    tree: Path, env: dict[str, str], log: Path, extra: dict[str, str]
) -> tuple[Any, str]:
    """portal.asgi of `tree` under one uvicorn process on the proxies' core (gs.start_gateway's
    command and options, run from `tree` with it first on the import path)."""
    import subprocess
    import sys

    from bench.gateway_overhead import PROXY_CPUS

    port = gs.free_port()
    cmd = ["taskset", "-c", PROXY_CPUS, sys.executable, "-m", "uvicorn", "portal.asgi:application"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    cmd += gs.PORTAL_UVICORN_OPTIONS
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        cmd,
        cwd=tree,
        env={**os.environ, **env, **extra, "PYTHONPATH": str(tree)},
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    gs.wait_http(base + "/v1/models", proc, log)
    return proc, base


def tree_commit(tree: Path) -> str:
    """The commit a checkout made by `git archive` came from (its BENCH_COMMIT file), or its
    path."""
    marker = tree / "BENCH_COMMIT"
    return marker.read_text().strip() if marker.exists() else str(tree)


def save(result: FeaturesResult) -> None:
    (VAR / "result.json").write_text(json.dumps(asdict(result), indent=2, default=str))


def load_result() -> FeaturesResult:
    data = json.loads((VAR / "result.json").read_text())
    data["latency"] = {
        kind: {name: gs.Summary(**s) for name, s in per.items()}
        for kind, per in data["latency"].items()
    }
    data["parts"] = [tuple(part) for part in data.get("parts", [])]
    return FeaturesResult(**data)
