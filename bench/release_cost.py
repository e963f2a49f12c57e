"""What a running release plan's sampling and scoring cost the caller: the gateway's added
latency with a plan on the alias called, against the same run with no plan (issue 45).

    .venv/bin/python -m bench.release_cost [--requests 1000] [--warmup 50]
        [--stub-requests 3000] [--concurrency 16] [--engine-cpus 0] [--engine-kinds 2]
        [--stream-tokens 4] [--write-docs] [--keep-db]

One gateway (portal.asgi under one uvicorn on core 1, as in bench/gateway_overhead.py) serves
one tenant's adapter `support`, two active versions resident on one real CPU vLLM engine, under
three aliases that differ only in the plan:

- `plain`: support@1 at 99 %, support@2 at 1 % (a manual canary), no plan: nothing sampled;
- `plan-10`, `plan-100`: support@1 alone, then a release plan started on it through the
  portal's own service (evals.services.release_plans.plan_start: candidate support@2, first
  step 1 %, so the same weights) with a sample share of 10 % and 100 % (the worst case). The
  gateway's route tables carry the share; the adapter's eval policy has live checks.

A real Celery worker (solo, on core 0) runs the scoring task (evals.tasks.score_release_samples)
every 0.5 s, sent by a small driver process in beat's place (beat would also run the plans'
controller, which is not measured here), so the samples the gateway sends are popped and scored
into the plans' step counts while the callers' requests run.

- Latency: one request at a time, the engine itself (`direct`) and the three aliases in the
  order of bench.gateway_overhead.send_order (each follows each equally often, so drift and what
  the engine did just before cancel), first through the real engine (--engine-kinds of
  chat, chat streaming, completions, completions streaming), then through the stub engine that
  answers at once (chat, completions: the gateway's own cost alone). Added = the arm's p50 (p99)
  minus the engine's own; plan - no plan = the planned arm's p50 minus `plain`'s, the goal's
  figure (within 0.1 ms), and the median of the per-round differences (paired).
- CPU per request: non-streaming chat at concurrency --concurrency through the stub (the gateway
  saturated), each alias in turn, in the order none, 10 %, 100 %, 100 %, 10 %, none; the
  gateway process's CPU seconds (utime + stime) over each run's requests.
- Samples: offered (= sent + dropped), sent to Redis and dropped, as the gateway's sends counted
  them (workers.redis_contract.keys.RELEASE_SAMPLES_COUNTS), scored by the worker into the
  plans' step counts, and left in the list at the end.

Database: BENCH_RELEASE_COST_DATABASE_URL (default .../lora_portal_bench_release_cost; created,
dropped at the end unless --keep-db); Redis: BENCH_RELEASE_COST_REDIS_URL (default DB 13,
flushed at start and end).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import uvloop

from bench import gateway_support as gs
from bench.docs_section import DOCS, markers, write_section
from engine.launcher import REPO_ROOT, EngineProcess, stop_engines

SECTION = "release-cost"
BEGIN, END = markers(SECTION)
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_release_cost"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/13"
VAR = REPO_ROOT / "var" / "bench" / "release-cost"
ARMS = ("none", "10%", "100%")
ALIAS = {"none": "plain", "10%": "plan-10", "100%": "plan-100"}
SHARE = {"10%": 0.10, "100%": 1.0}
CANARY = 1  # the candidate's weight: the plans' first step, and the plain alias's manual split
GOAL_MS = 0.1
LIVE_CHECKS = {"not_contains": ["BENCH-BANNED-MARKER"], "max_chars": 4000}
SCORE_EVERY_S = 0.5
DRAIN_WAIT_S = 60.0
THROUGHPUT_ORDER = ("none", "10%", "100%", "100%", "10%", "none")


@dataclass
class CostResult:
    latency: dict[str, dict[str, dict[str, gs.Summary]]]  # upstream -> kind -> target -> summary
    paired: dict[str, dict[str, dict[str, float]]]  # upstream -> kind -> arm -> median diff ms
    cpu_ms: dict[str, float]  # arm -> gateway CPU ms per request (stub, saturated)
    rps: dict[str, float]  # arm -> requests per second (stub, saturated)
    samples: dict[str, int]  # offered, sent, dropped, scored, left (the whole run)
    requests: int
    warmup: int
    stub_requests: int
    concurrency: int
    engine_cpus: str
    stream_tokens: int = 4
    stub_latency_requests: int = 0  # per kind and target through the stub (0: `requests`)
    # offered, sent, dropped by the end of the latency phases (one request at a time)
    samples_one_at_a_time: dict[str, int] = field(default_factory=dict)
    # ReleaseSamples.offer alone, microseconds per call: kept, dropped (offer_cost)
    offer_us: dict[str, float] = field(default_factory=dict)
    offer_body_bytes: int = 0
    machine: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def added(self, upstream: str, kind: str, arm: str) -> tuple[float, float]:
        per = self.latency[upstream][kind]
        return per[arm].p50 - per["direct"].p50, per[arm].p99 - per["direct"].p99

    def plan_minus_none(self, upstream: str, kind: str, arm: str) -> float:
        per = self.latency[upstream][kind]
        return per[arm].p50 - per["none"].p50

    def goals(self) -> list[tuple[str, str, bool]]:
        out = []
        for upstream, how in (("stub", "stub engine"), ("engine", "real CPU engine")):
            for arm in ARMS[1:]:
                diffs = {k: self.plan_minus_none(upstream, k, arm) for k in self.latency[upstream]}
                worst = max(diffs, key=lambda k: diffs[k])
                out.append(
                    (
                        f"added p50 with a plan sampling {arm} within {GOAL_MS} ms of no plan "
                        f"(worst kind, {how})",
                        f"{diffs[worst]:+.3f} ms ({worst})",
                        diffs[worst] <= GOAL_MS,
                    )
                )
        return out


def render(r: CostResult, command: str) -> str:
    s = r.samples
    lines = [
        BEGIN,
        "## Release plans: what sampling and scoring cost the caller (issue 45)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {r.machine}. Run: {r.seconds:.0f} s. One gateway process (portal.asgi, one "
        "uvicorn, core 1) and three aliases of one adapter that differ only in the plan: "
        f"`plain` (support@1 {100 - CANARY} %, support@2 {CANARY} %, no plan) and `plan-10`, "
        "`plan-100` (a release plan started through evals.services.release_plans.plan_start, "
        f"candidate support@2 at its first step, {CANARY} %, sampling 10 % and 100 % of the "
        "alias's live answers; live checks `not_contains` and `max_chars`). A real Celery "
        f"worker (solo, core 0) ran the scoring task every {SCORE_EVERY_S:g} s throughout. "
        f"Latency: {r.requests} requests per kind and target through the engine, "
        f"{r.stub_latency_requests or r.requests} through the stub, after {r.warmup} of "
        "warm-up, one at a time, the engine itself and the three aliases interleaved (send_order: each "
        "follows each equally often). Non-streaming: the request's total time (max_tokens "
        f"1); streaming: the time to the first event carrying text (max_tokens "
        f"{r.stream_tokens}). "
        + (
            f"The engine's process tree under `taskset -c {r.engine_cpus}`; the load generator "
            "on the gateway's core while it measures latency."
            if r.engine_cpus
            else "The engine not pinned; the load generator on core 0."
        ),
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        *[f"| {goal} | {value} | {'yes' if ok else 'no'} |" for goal, value, ok in r.goals()],
    ]
    for upstream, title in (("stub", "stub engine"), ("engine", "real CPU engine")):
        lines += [
            "",
            f"Latency through the {title}, p50 / p99 in ms; (added p50 against the engine "
            "itself); [plan - no plan: p50 difference, median of per-round differences]:",
            "",
            "| kind | engine | no plan | plan, 10 % | plan, 100 % |",
            "|---|---|---|---|---|",
        ]
        for kind, per in r.latency[upstream].items():
            cells = [f"{per['direct'].p50:.2f} / {per['direct'].p99:.2f}"]
            for arm in ARMS:
                p50, _ = r.added(upstream, kind, arm)
                cell = f"{per[arm].p50:.2f} / {per[arm].p99:.2f} ({p50:+.2f})"
                if arm != "none":
                    paired = r.paired[upstream][kind].get(arm)
                    cell += (
                        f" [{r.plan_minus_none(upstream, kind, arm):+.3f}, "
                        + ("-" if paired is None else f"{paired:+.3f}")
                        + "]"
                    )
                cells.append(cell)
            lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Saturated through the stub (non-streaming chat at c={r.concurrency}, "
        f"{r.stub_requests} requests per alias, twice, order {', '.join(THROUGHPUT_ORDER)}):",
        "",
        "| | no plan | plan, 10 % | plan, 100 % |",
        "|---|---|---|---|",
        "| gateway CPU ms per request | "
        + " | ".join(
            f"{r.cpu_ms[a]:.3f}"
            + ("" if a == "none" else f" ({r.cpu_ms[a] - r.cpu_ms['none']:+.3f})")
            for a in ARMS
        )
        + " |",
        "| requests per second | " + " | ".join(f"{r.rps[a]:.0f}" for a in ARMS) + " |",
        "",
        "The achieved rate moves with what else core 0 runs meanwhile (the stub, the load "
        "generator, the scoring worker); the gateway's CPU per request, on its own core, is the "
        "figure compared.",
        "",
        f"Samples over the whole run: {s['offered']} offered by the gateway, {s['sent']} sent to "
        f"Redis, {s['dropped']} dropped (the replica's buffer full, or Redis refused); "
        f"{s['scored']} scored by the worker into the plans' step counts, {s['left']} left in "
        "the list at the end."
        + (
            f" Of these, by the end of the latency phases (one request at a time): {o['offered']} "
            f"offered, {o['sent']} sent, {o['dropped']} dropped; the rest in the saturated runs."
            if (o := r.samples_one_at_a_time)
            else ""
        ),
        *(
            [
                "",
                f"The sampling path's own cost (ReleaseSamples.offer called in a loop, one core, "
                f"a {r.offer_body_bytes}-byte reply and its messages): "
                f"{r.offer_us['kept']:.1f} us per sample kept (the JSON encode), "
                f"{r.offer_us['dropped']:.2f} us per sample dropped (the buffer full).",
            ]
            if r.offer_us
            else []
        ),
        *r.notes,
        END,
    ]
    return "\n".join(lines)


# --- the world ---


@dataclass
class Services:
    engine: EngineProcess | None = None
    procs: list[Any] = field(default_factory=list)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            gs.stop_group(proc)
        if self.engine is not None:
            stop_engines([self.engine])


def seed_aliases(tenancy: gs.Tenancy, stable: Any, candidate: Any) -> dict[str, Any]:
    """The three aliases; a plan on each planned one, through the portal's own service."""
    from adapters.access import AccessContext
    from adapters.models import Alias
    from adapters.services.aliases import alias_set
    from evals.services import release_plans
    from tests.evals.live_policy import live_checks_policy

    owner = AccessContext.for_user(tenancy.owner)
    live_checks_policy(tenant=tenancy.tenant, adapter=stable.adapter, checks=LIVE_CHECKS)
    one = f"{stable.adapter.name}@{stable.number}"
    two = f"{candidate.adapter.name}@{candidate.number}"
    alias_set(
        access=owner,
        tenant=tenancy.tenant,
        name=ALIAS["none"],
        targets=[{"version": one, "weight": 100 - CANARY}, {"version": two, "weight": CANARY}],
    )
    plans = {}
    for arm, share in SHARE.items():
        alias_set(
            access=owner,
            tenant=tenancy.tenant,
            name=ALIAS[arm],
            targets=[{"version": one, "weight": 100}],
        )
        plans[arm] = release_plans.plan_start(
            access=owner,
            alias=Alias.objects.get(tenant=tenancy.tenant, name=ALIAS[arm]),
            candidate=two,
            steps=[CANARY, 100],
            min_step_seconds=86_400,  # no controller runs; nothing moves while we measure
            min_step_samples=10,
            sample_share=share,
        )
    return plans


def start_scoring(env: dict[str, str]) -> list[Any]:
    """A real Celery worker on core 0, and a driver sending it the scoring task every
    SCORE_EVERY_S (beat's place)."""
    from portal.celery import app

    name = f"release-cost@{os.uname().nodename}"
    cmd = [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", "portal"]
    cmd += ["--pool", "solo", "-n", name, "--loglevel", "WARNING"]
    cmd += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    log = VAR / "worker.log"
    worker = gs.spawn(cmd, log=log, env={**os.environ, **env}, cpus="0")
    deadline = time.monotonic() + 120
    while not app.control.ping(destination=[name], timeout=0.5):
        if worker.poll() is not None or time.monotonic() > deadline:
            gs.stop_group(worker)
            raise RuntimeError(f"celery worker did not start: {log.read_text()[-2000:]}")
    driver = gs.spawn(
        [sys.executable, "-m", "bench.release_cost", "drive-scoring"],
        log=VAR / "driver.log",
        env={**os.environ, **env},
        cpus="0",
    )
    return [worker, driver]


def drive_scoring() -> None:
    """The driver process: the scoring task, every SCORE_EVERY_S, until stopped."""
    from portal.celery import app

    while True:
        app.send_task("evals.tasks.score_release_samples")
        time.sleep(SCORE_EVERY_S)


def gateway_counts() -> dict[str, int]:
    """Offered, sent and dropped as the gateway's sends counted them, once its flush loop has
    sent what it held (it sends every GATEWAY_MEASUREMENT_FLUSH_SECONDS)."""
    import redis as redis_sync
    from django.conf import settings

    from workers.redis_contract.keys import RELEASE_SAMPLES_COUNTS

    time.sleep(2 * settings.GATEWAY_MEASUREMENT_FLUSH_SECONDS)
    client = redis_sync.Redis.from_url(os.environ["REDIS_URL"])
    try:
        raw = client.hgetall(RELEASE_SAMPLES_COUNTS)
        counts = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
    finally:
        client.close()
    sent, dropped = counts.get("sent", 0), counts.get("dropped", 0)
    return {"offered": sent + dropped, "sent": sent, "dropped": dropped}


def sample_counts(plans: dict[str, Any]) -> dict[str, int]:
    """gateway_counts, what the worker scored and what is left in the list (after waiting,
    bounded, for the worker to empty it)."""
    import redis as redis_sync

    from evals.models import ReleaseStep
    from workers.redis_contract.keys import RELEASE_SAMPLES

    counts = gateway_counts()
    client = redis_sync.Redis.from_url(os.environ["REDIS_URL"])
    try:
        deadline = time.monotonic() + DRAIN_WAIT_S
        while client.llen(RELEASE_SAMPLES) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(2 * SCORE_EVERY_S)  # the last batch popped is committed
        left = int(client.llen(RELEASE_SAMPLES))
    finally:
        client.close()
    scored = sum(
        s.stable_n + s.candidate_n
        for s in ReleaseStep.objects.filter(plan__in=[p.pk for p in plans.values()])
    )
    return {**counts, "scored": scored, "left": left}


# --- measuring ---


def offer_cost(calls: int = 20_000) -> tuple[dict[str, float], int]:
    """ReleaseSamples.offer in a loop, as the gateway calls it after a reply (a stub engine's
    chat reply and the bench's messages): microseconds per call, kept and dropped."""
    from bench.gateway_overhead import PROMPT
    from gateway.release_samples import ReleaseSamples

    body = gs.stub_response(b'{"model": "bench--support--v1"}').split(b"\r\n\r\n", 1)[1]
    prompt = [{"role": "user", "content": PROMPT}]
    out = {}
    for label, capacity in (("kept", calls), ("dropped", 0)):
        samples = ReleaseSamples(None, capacity)  # type: ignore[arg-type]  # offer never sends
        started = time.perf_counter()
        for _ in range(calls):
            samples.offer(alias_id=1, version_id=2, at=time.time(), body=body, prompt=prompt)
        out[label] = (time.perf_counter() - started) * 1e6 / calls
    return out, len(body)


def measure(args: argparse.Namespace, services: Services, db_url: str) -> CostResult:
    from bench.gateway_overhead import (
        KINDS,
        LOADGEN_CPUS,
        PROXY_CPUS,
        STUB_CPUS,
        measure_latency,
        measure_throughput,
        paired_added,
        point_engine_row,
    )

    started, load_before = time.time(), os.getloadavg()[0]
    tiny = gs.tiny_model()
    key = secrets.token_hex(16)
    config = gs.engine_config(
        tiny, VAR, "engine", key, max_loras=2, max_cpu_loras=3, cpu_cores=args.engine_cpus or None
    )
    services.engine = EngineProcess(config).start()
    redis_url = os.environ.get("BENCH_RELEASE_COST_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys={"bench-engine": key})
    gs.django_setup(env, db_url)
    from tests.workers.fleet import servable_version
    from workers.models import Engine

    tenancy = gs.seed_tenancy(tiny)
    services.engine.wait_ready(timeout=gs.READY_TIMEOUT_S)
    stable = gs.seed_resident_adapter(
        services.engine, key, tenancy, VAR, max_concurrent_requests=64
    )
    candidate = servable_version(stable.adapter, VAR / "src", seed=2)
    gs.make_resident(
        services.engine,
        key,
        Engine.objects.get(name="bench-engine"),
        candidate,
        VAR / "src" / "src-support-2",
    )
    plans = seed_aliases(tenancy, stable, candidate)
    stub, stub_url = gs.start_stub(VAR / "stub.log", cpus=STUB_CPUS)
    services.procs.append(stub)
    services.procs += start_scoring(env)
    gateway, url = gs.start_gateway(env, VAR / "gateway.log", cpus=PROXY_CPUS)
    services.procs.append(gateway)
    auth = {"authorization": f"Bearer {tenancy.token}"}
    arms = {arm: gs.Target(arm, url, ALIAS[arm], auth) for arm in ARMS}
    direct = gs.Target(
        "direct", services.engine.base_url, stable.served_name, {"authorization": f"Bearer {key}"}
    )
    latency_cpus = {int(PROXY_CPUS)} if args.engine_cpus else LOADGEN_CPUS
    # chat, chat streaming, completions, completions streaming: the first --engine-kinds
    engine_kinds = tuple(
        (label, chat, stream, args.stream_tokens if stream else n)
        for label, chat, stream, n in (KINDS[0], KINDS[2], KINDS[1], KINDS[3])
    )[: args.engine_kinds]
    latency, paired = {}, {}
    with gs.pinned_to(latency_cpus):
        raw = uvloop.run(
            measure_latency(
                {"direct": direct, **arms},
                requests=args.requests,
                warmup=args.warmup,
                kinds=engine_kinds,
            )
        )
    latency["engine"], paired["engine"] = _summaries(raw, engine_kinds, paired_added)
    point_engine_row("bench-engine", stub_url)
    stub_direct = gs.Target("direct", stub_url, stable.served_name, {})
    with gs.pinned_to(latency_cpus):
        raw = uvloop.run(
            measure_latency(
                {"direct": stub_direct, **arms},
                requests=args.stub_latency_requests or args.requests,
                warmup=args.warmup,
                kinds=KINDS[:2],
            )
        )
    latency["stub"], paired["stub"] = _summaries(raw, KINDS[:2], paired_added)
    one_at_a_time = gateway_counts()
    cpu_s: dict[str, float] = dict.fromkeys(ARMS, 0.0)
    done: dict[str, int] = dict.fromkeys(ARMS, 0)
    wall: dict[str, float] = dict.fromkeys(ARMS, 0.0)
    with gs.pinned_to(LOADGEN_CPUS):
        for arm in THROUGHPUT_ORDER:
            time.sleep(2.0)  # the previous run's last samples are sent before this one counts
            run = uvloop.run(
                measure_throughput(
                    arms[arm],
                    gateway.pid,
                    upstream="stub",
                    count=args.stub_requests,
                    concurrency=args.concurrency,
                )
            )
            cpu_s[arm] += run.cpu_s or 0.0
            done[arm] += run.requests
            wall[arm] += run.seconds
    point_engine_row("bench-engine", services.engine.base_url)
    samples = sample_counts(plans)
    with gs.pinned_to({int(PROXY_CPUS)}):
        offer_us, offer_body_bytes = offer_cost()
    return CostResult(
        latency=latency,
        paired=paired,
        cpu_ms={arm: cpu_s[arm] * 1000 / done[arm] for arm in ARMS},
        rps={arm: done[arm] / wall[arm] for arm in ARMS},
        samples=samples,
        requests=args.requests,
        warmup=args.warmup,
        stub_requests=args.stub_requests,
        concurrency=args.concurrency,
        engine_cpus=args.engine_cpus,
        stream_tokens=args.stream_tokens,
        stub_latency_requests=args.stub_latency_requests,
        samples_one_at_a_time=one_at_a_time,
        offer_us=offer_us,
        offer_body_bytes=offer_body_bytes,
        machine=gs.machine_note(load_before, [services.engine]),
        seconds=time.time() - started,
    )


def _summaries(
    raw: dict[str, dict[str, list[gs.Sample]]], kinds: Any, paired_added: Any
) -> tuple[dict[str, dict[str, gs.Summary]], dict[str, dict[str, float]]]:
    latency = {
        label: {name: gs.summarize(samples, ttft=stream) for name, samples in raw[label].items()}
        for label, _chat, stream, _n in kinds
    }
    paired = {
        label: {
            arm: value
            for arm in ARMS[1:]
            if (value := paired_added(raw[label]["none"], raw[label][arm], ttft=stream)) is not None
        }
        for label, _chat, stream, _n in kinds
    }
    return latency, paired


def load_result() -> CostResult:
    data = json.loads((VAR / "result.json").read_text())
    data["latency"] = {
        upstream: {
            kind: {name: gs.Summary(**s) for name, s in per.items()} for kind, per in kinds.items()
        }
        for upstream, kinds in data["latency"].items()
    }
    return CostResult(**data)


def main() -> None:
    if sys.argv[1:2] == ["drive-scoring"]:
        drive_scoring()
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000, help="per kind and target")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument(
        "--stub-latency-requests",
        type=int,
        default=0,
        help="per kind and target through the stub (default: --requests)",
    )
    parser.add_argument("--stub-requests", type=int, default=3000, help="per alias and run")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--engine-kinds",
        type=int,
        default=2,
        choices=(1, 2, 3, 4),
        help="kinds through the real engine: chat, chat streaming, completions, completions "
        "streaming (the first N)",
    )
    parser.add_argument(
        "--stream-tokens",
        type=int,
        default=4,
        help="max_tokens of a streaming request (its time to first token is measured)",
    )
    parser.add_argument(
        "--engine-cpus",
        default="",
        help="the engine's whole process tree on these cores (taskset -c), e.g. 0",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    parser.add_argument("--keep-db", action="store_true", help="leave the database to inspect")
    parser.add_argument("--note", action="append", default=[], help="a paragraph to add")
    parser.add_argument(
        "--render-only",
        metavar="COMMAND",
        help="no measuring: render the last run's result.json, run as COMMAND",
    )
    args = parser.parse_args()
    command = " ".join([".venv/bin/python -m bench.release_cost", *sys.argv[1:]])
    if args.render_only:
        section = render(load_result(), args.render_only)
    else:
        db_url = os.environ.get("BENCH_RELEASE_COST_DATABASE_URL", DEFAULT_DB_URL)
        services = Services()
        result = gs.measure_and_save(
            VAR, db_url, args.keep_db, services, lambda: measure(args, services, db_url)
        )
        section = render(result, command)
    if args.note:
        section = section.replace(END, "".join(f"\n{note}\n" for note in args.note) + END)
    print(section)
    if args.write_docs:
        write_section(SECTION, section)


if __name__ == "__main__":
    main()
