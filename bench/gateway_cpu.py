"""The gateway's CPU per request against the stub engine, code against code or arm against arm.

    .venv/bin/python -m bench.gateway_cpu [--requests 3000] [--rounds 3] [--concurrency 16]
        [--tree NAME=PATH ...] [--arm NAME=ENV=VALUE,... ...] [--profile NAME]

No real engine: one stub engine that answers at once (bench.gateway_support's, on core 0 with
the load generator) and one gateway per tree and arm (portal.asgi under one uvicorn process on
core 1, as bench.gateway_overhead runs it), every feature on: a budget on every scope the
request has (tenant, token, alias `support-bot`), service classes, the live headroom and lanes;
tracing off. Each round sends `--requests` non-streaming chat requests at `--concurrency` to
each gateway in turn (after a warm-up), and reads the gateway's utime + stime from /proc over
them: CPU milliseconds per request, the number other load on the machine moves least.

`--tree NAME=PATH`: a gateway runs the code of PATH (a checkout of this repository, e.g. the
commit before a change: `git archive <commit> | tar -x -C /tmp/base`), so a change is measured
against the code before it in one run, rounds interleaved. `--arm NAME=K=V,...`: a gateway of
this tree with extra environment (e.g. `classes-off=GATEWAY_SERVICE_CLASSES=0`).
`--profile NAME`: that gateway runs under cProfile; its top functions are printed at the end.

Database: BENCH_GATEWAY_CPU_DATABASE_URL (default .../lora_portal_bench_gateway_cpu, created and
dropped); Redis: BENCH_GATEWAY_CPU_REDIS_URL (default DB 12, flushed at start and end).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import uvloop

from bench import gateway_support as gs
from engine.launcher import REPO_ROOT

VAR = REPO_ROOT / "var" / "bench" / "gateway-cpu"
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_gateway_cpu"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/12"
PROXY_CPUS, LOADGEN_CPUS, STUB_CPUS = "1", {0}, "0"
ALIAS = "support-bot"


def seed(stub_url: str) -> str:
    """A tenant, its inference token, an adapter version resident on an engine row that points at
    the stub, the alias and a budget on every scope; the bearer token."""
    from adapters.models import Adapter
    from bench.gateway_overhead import seed_budgets
    from tests.workers.fleet import servable_version
    from workers.models import Engine, EngineState, Residency, ResidencyState

    tenancy = gs.seed_tenancy(gs.tiny_model())
    adapter = Adapter.objects.create(
        tenant=tenancy.tenant,
        name="support",
        base_model=tenancy.base,
        max_concurrent_requests=64,
    )
    version = servable_version(adapter, VAR / "src", seed=1)
    engine = Engine.objects.create(
        name="bench-engine",
        base_model=tenancy.base,
        url=stub_url,
        served_model_name="tiny",
        max_loras=2,
        max_cpu_loras=3,
        max_lora_rank=16,
        max_num_seqs=32,
        max_model_len=2048,
        adapter_root=str(VAR / "adapters"),
        has_plugin=True,
        state=EngineState.UP,
        pool="shared",
    )
    Residency.objects.create(
        engine=engine,
        version=version,
        desired_state=ResidencyState.RESIDENT_GPU,
        observed_state=ResidencyState.RESIDENT_GPU,
    )
    seed_budgets(tenancy)
    return tenancy.token


def start(
    name: str, tree: Path, env: dict[str, str], extra: dict[str, str], profile: bool
) -> tuple[subprocess.Popen[bytes], str]:
    port = gs.free_port()
    if profile:
        cmd = [sys.executable, "-m", "bench.gateway_support", "gateway-profiled", str(port)]
        cmd.append(str(VAR / f"{name}.prof"))
    else:
        cmd = [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--workers", "1", *gs.PORTAL_UVICORN_OPTIONS]
    log = VAR / f"{name}.log"
    full = {**os.environ, **env, **extra, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        ["taskset", "-c", PROXY_CPUS, *cmd],
        cwd=tree,
        env=full,
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    gs.wait_http(base + "/v1/models", proc, log)
    return proc, base


def stub_latency(
    targets: dict[str, tuple[gs.Target, int]], stub_url: str, body: bytes, count: int
) -> dict[str, dict[str, float]]:
    """`count` chat requests one at a time per target, in send_order (the stub's own too), the
    load generator on the gateways' core as in bench.gateway_overhead's latency phase; p50 and p99
    (ms), and what each gateway adds to the stub's own p50 and p99."""
    from bench.gateway_overhead import measure_latency

    direct = gs.Target("direct", stub_url, "stub", {})
    all_targets = {"direct": direct, **{name: t for name, (t, _pid) in targets.items()}}
    with gs.pinned_to({int(PROXY_CPUS)}):
        raw = uvloop.run(
            measure_latency(
                all_targets,
                requests=count,
                warmup=max(20, count // 10),
                kinds=(("chat", True, False, 1),),
            )
        )
    summaries = {name: gs.summarize(samples, ttft=False) for name, samples in raw["chat"].items()}
    base = summaries["direct"]
    return {
        name: {
            "p50": round(s.p50, 3),
            "p99": round(s.p99, 3),
            "added_p50": round(s.p50 - base.p50, 3),
            "added_p99": round(s.p99 - base.p99, 3),
            "errors": s.errors,
        }
        for name, s in summaries.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--arm", action="append", default=[], metavar="NAME=K=V,...")
    parser.add_argument("--profile", metavar="NAME", default="")
    parser.add_argument(
        "--latency",
        type=int,
        default=0,
        help="also this many chat requests one at a time per target, the stub itself included",
    )
    args = parser.parse_args()
    gateways: dict[str, tuple[Path, dict[str, str]]] = {}
    for spec in args.tree or [f"this={REPO_ROOT}"]:
        name, _, path = spec.partition("=")
        gateways[name] = (Path(path).resolve(), {})
    for spec in args.arm:
        name, _, pairs = spec.partition("=")
        extra = dict(pair.split("=", 1) for pair in pairs.split(",") if pair)
        gateways[name] = (REPO_ROOT, extra)

    from bench.list_versions import drop_database

    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir(parents=True)
    db_url = os.environ.get("BENCH_GATEWAY_CPU_DATABASE_URL", DEFAULT_DB_URL)
    redis_url = os.environ.get("BENCH_GATEWAY_CPU_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys={})
    procs: list[Any] = []
    cpu: dict[str, list[float]] = {name: [] for name in gateways}
    rps: dict[str, list[float]] = {name: [] for name in gateways}
    latency: dict[str, dict[str, float]] = {}
    load_before = os.getloadavg()[0]
    try:
        with gs.sigterm_runs_cleanup():
            gs.django_setup(env, db_url)
            stub, stub_url = gs.start_stub(VAR / "stub.log", cpus=STUB_CPUS)
            procs.append(stub)
            token = seed(stub_url)
            targets = {}
            for name, (tree, extra) in gateways.items():
                proc, url = start(name, tree, env, extra, profile=name == args.profile)
                procs.append(proc)
                auth = {"authorization": f"Bearer {token}"}
                targets[name] = (gs.Target(name, url, ALIAS, auth), proc.pid)
            body = gs.request_body(
                targets[next(iter(targets))][0], chat=True, stream=False, max_tokens=1, text="Tea?"
            )
            with gs.pinned_to(LOADGEN_CPUS):
                for name, (target, _pid) in targets.items():  # warm each once
                    samples, _ = uvloop.run(
                        gs.raw_closed_loop(
                            target,
                            path="/v1/chat/completions",
                            body=body,
                            count=max(200, args.requests // 5),
                            concurrency=args.concurrency,
                            deadline_s=120,
                        )
                    )
                    failed = [s for s in samples if not s.ok]
                    if failed:
                        sys.exit(f"{name}: {len(failed)} failed, e.g. {failed[0].error}")
                if args.latency:
                    latency = stub_latency(targets, stub_url, body, args.latency)
                for round_ in range(args.rounds):
                    order = list(targets) if round_ % 2 == 0 else list(reversed(targets))
                    for name in order:
                        target, pid = targets[name]
                        before = gs.cpu_seconds(pid)
                        samples, seconds = uvloop.run(
                            gs.raw_closed_loop(
                                target,
                                path="/v1/chat/completions",
                                body=body,
                                count=args.requests,
                                concurrency=args.concurrency,
                                deadline_s=300,
                            )
                        )
                        used = gs.cpu_seconds(pid) - before
                        errors = sum(not s.ok for s in samples)
                        cpu[name].append(used * 1000 / len(samples))
                        rps[name].append((len(samples) - errors) / seconds)
                        print(
                            f"round {round_} {name}: {cpu[name][-1]:.3f} ms CPU/request, "
                            f"{rps[name][-1]:.0f} req/s, {errors} errors",
                            flush=True,
                        )
    finally:
        for proc in reversed(procs):
            gs.stop_group(proc)
        if os.environ.get("DATABASE_URL") == db_url:
            gs.flush_redis(redis_url)
            drop_database(db_url)
    summary: dict[str, Any] = {
        name: {
            "cpu_ms_per_request_median": round(statistics.median(values), 4),
            "cpu_ms_per_request": [round(v, 4) for v in values],
            "req_per_s_median": round(statistics.median(rps[name]), 1),
        }
        for name, values in cpu.items()
    }
    if args.latency:
        summary["latency_ms"] = latency
    summary["load_average"] = {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)}
    print(json.dumps(summary, indent=1))
    (VAR / "result.json").write_text(json.dumps(summary, indent=1))
    if args.profile:
        import pstats

        stats = pstats.Stats(str(VAR / f"{args.profile}.prof"))
        stats.sort_stats("tottime").print_stats(35)
        stats.sort_stats("cumulative").print_stats(60)


if __name__ == "__main__":
    main()
