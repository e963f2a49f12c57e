"""What tracing costs the gateway, and whether every traced request's engine span joins it.

    .venv/bin/python -m bench.gateway_overhead --tracing [--requests 300] [--warmup 30]
        [--load-requests 1000] [--stub-requests 5000] [--concurrency 16] [--write-docs]

In one run, three gateways (each portal.asgi under one uvicorn on core 1, as in the overhead
benchmark) serve the same tenant, alias and resident adapter version: tracing off (no OTLP
endpoint), on at 1 % (`OTEL_TRACES_SAMPLER=traceidratio`, `OTEL_TRACES_SAMPLER_ARG=0.01`) and on
at 100 % (`always_on`). Their spans, and the real CPU vLLM engine's own (launched with
`--otlp-traces-endpoint`), go to a real OTLP/HTTP receiver process (tests/fixtures/otlp_receiver.py).

- Join: every request sent through the 100 % gateway to the real engine (latency and load
  phases) is looked for in what the receiver got: a gateway request span carrying tenant,
  alias, adapter version and cache tier, whose engine-call child is the parent of a vLLM span.
- Latency: one request at a time, the three gateways in turn (send_order), first through the real
  engine, then through the stub engine that answers at once (the gateway's own cost alone);
  added p50 = the traced gateway's p50 minus the untraced one's, per kind.
- Throughput: non-streaming chat at concurrency 16, the gateways in turn and five rounds over
  (their order repeated: the machine's drift falls on each alike), through the stub (the
  gateway is the bottleneck) and through the real engine.
- CPU per request (the throughput runs): the gateway process's utime + stime, and apart from it
  its span exporter's (core.span_export: a child process that builds and encodes the OTLP
  spans). Each exporter, and the OTLP receiver, run on core 0, beside the load generator and the
  stub, as a collector or agent runs beside a gateway; the gateways have core 1 to themselves.
  With it, the share of its core each gateway's process was busy: near 100 %, the gateway was
  the bottleneck of the run; well below, the other core was.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import uvloop

from bench import gateway_support as gs
from bench.docs_section import markers
from engine.launcher import REPO_ROOT, EngineProcess

BEGIN, END = markers("gateway-tracing")
VAR = REPO_ROOT / "var" / "bench" / "gateway-tracing"
ALIAS = "support-bot"
MODES = {
    "off": {},
    "1%": {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
    "100%": {"OTEL_TRACES_SAMPLER": "always_on"},
}
SERVICE = {"1%": "bench-gateway-1pct", "100%": "bench-gateway-100pct"}
GOAL_P50_MS = {"1%": 0.2, "100%": 0.5}
GOAL_RPS_RATIO = 0.97
IDENTITY = (
    "lora_portal.tenant",
    "lora_portal.alias",
    "lora_portal.adapter_version",
    "lora_portal.cache_tier",
)
JOIN_WAIT_S = 120.0
EXPORTER_CPUS = {0}
ROUNDS = 5  # throughput: the modes interleaved, this many rounds each
EXPORTER_MODULE = "core.span_export"


@dataclass
class TracingResult:
    latency: dict[str, dict[str, dict[str, gs.Summary]]]  # upstream -> kind -> mode -> summary
    throughput: dict[str, dict[str, float]]  # upstream -> mode -> requests per second
    sent_traced: int  # requests the 100 % gateway sent the real engine
    joined: int  # of those, traced end to end with the whole identity
    gateway_spans: int
    engine_spans: int
    requests: int
    load_requests: int
    stub_requests: int
    concurrency: int
    machine: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    # upstream -> mode -> ms of CPU per request: the gateway's process, and its span exporter's
    cpu_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    exporter_cpu_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    gateway_busy: dict[str, dict[str, float]] = field(default_factory=dict)  # share of its core
    # the stub phase at 100 %: requests the gateway served, and request spans the receiver got
    stub_sent_traced: int = 0
    stub_spans: int = 0
    # upstream -> mode -> process on core 0 -> ms of CPU per request (load generator, stub, receiver)
    core0_ms: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    # upstream -> mode -> each round's requests per second (the spread the totals hide)
    round_rps: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def added_p50(self, upstream: str, kind: str, mode: str) -> float:
        per = self.latency[upstream][kind]
        return per[mode].p50 - per["off"].p50

    def rps_ratio(self, upstream: str, mode: str) -> float:
        per = self.throughput[upstream]
        return per[mode] / per["off"]

    def goals(self) -> list[tuple[str, str, bool]]:
        out = []
        share = self.joined / self.gateway_spans if self.gateway_spans else 0.0
        out.append(
            (
                "every request the 100 % gateway sent the engine has its request span",
                f"{self.gateway_spans} request spans for {self.sent_traced} requests sent",
                self.gateway_spans >= self.sent_traced,
            )
        )
        out.append(
            (
                "engine span joins a gateway span with tenant, alias, version, tier (100 %)",
                f"{self.joined} of {self.gateway_spans} ({share:.1%})",
                self.gateway_spans > 0 and self.joined == self.gateway_spans,
            )
        )
        for mode, goal in GOAL_P50_MS.items():
            worst = max(self.added_p50("stub", kind, mode) for kind in self.latency["stub"])
            out.append(
                (
                    f"added p50 at {mode} sampling <= +{goal} ms (worst kind, stub engine)",
                    f"{worst:+.2f} ms",
                    worst <= goal,
                )
            )
        for mode in ("1%", "100%"):
            ratio = self.rps_ratio("stub", mode)
            out.append(
                (
                    f"throughput at c={self.concurrency}, {mode} sampling >= {GOAL_RPS_RATIO}x "
                    "(stub engine: the gateway is the bottleneck)",
                    f"{ratio:.3f}x",
                    ratio >= GOAL_RPS_RATIO,
                )
            )
        return out


def render(r: TracingResult, command: str) -> str:
    lines = [
        BEGIN,
        "## Gateway tracing: its cost, and the engine's span joined to it",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {r.machine}. Run: {r.seconds:.0f} s. {r.requests} requests per gateway and "
        f"kind (latency), {r.load_requests} (real engine) and {r.stub_requests} (stub) at "
        f"c={r.concurrency} (throughput). Spans exported through the batch processor to a real "
        "OTLP/HTTP receiver process; the engine exports its own (vLLM `--otlp-traces-endpoint`).",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
    ]
    lines += [f"| {goal} | {value} | {'yes' if ok else 'no'} |" for goal, value, ok in r.goals()]
    for upstream, title in (("stub", "stub engine"), ("engine", "real CPU engine")):
        lines += [
            "",
            f"Latency through the {title}, p50 / p99 in ms (added p50 against tracing off):",
            "",
            "| kind | off | 1 % | 100 % |",
            "|---|---|---|---|",
        ]
        for kind, per in r.latency[upstream].items():
            cells = [f"{per['off'].p50:.2f} / {per['off'].p99:.2f}"]
            for mode in ("1%", "100%"):
                added = r.added_p50(upstream, kind, mode)
                cells.append(f"{per[mode].p50:.2f} / {per[mode].p99:.2f} ({added:+.2f})")
            lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Throughput at c={r.concurrency}, requests per second (ratio to tracing off):",
        "",
        "| upstream | off | 1 % | 100 % |",
        "|---|---|---|---|",
    ]
    for upstream, rates in r.throughput.items():
        cells = [f"{rates['off']:.0f}"]
        cells += [f"{rates[m]:.0f} ({rates[m] / rates['off']:.3f}x)" for m in ("1%", "100%")]
        lines.append(f"| {upstream} | " + " | ".join(cells) + " |")
    for upstream, rounds in r.round_rps.items():
        cells = []
        for m in ("1%", "100%"):
            ratios = sorted(a / b for a, b in zip(rounds[m], rounds["off"], strict=True) if b)
            if ratios:
                median = ratios[len(ratios) // 2]
                cells.append(f"{m} {ratios[0]:.3f}x to {ratios[-1]:.3f}x (median {median:.3f}x)")
        if cells:
            lines.append("")
            lines.append(
                f"Each round's ratio to the same round's tracing off, {upstream}: "
                + "; ".join(cells)
                + "."
            )
    if r.cpu_ms:
        lines += [
            "",
            "CPU per request in the throughput runs, ms: the gateway's process (+ its span "
            "exporter process, core.span_export):",
            "",
            "| upstream | off | 1 % | 100 % |",
            "|---|---|---|---|",
        ]
        for upstream, cpu in r.cpu_ms.items():
            exporter = r.exporter_cpu_ms.get(upstream, {})
            cells = [f"{cpu['off']:.3f}"]
            cells += [f"{cpu[m]:.3f} (+ {exporter.get(m, 0.0):.3f})" for m in ("1%", "100%")]
            lines.append(f"| {upstream} | " + " | ".join(cells) + " |")
        for upstream, shares in r.gateway_busy.items():
            cells = [f"{shares[m]:.0%}" for m in MODES]
            lines.append(f"| {upstream}: gateway's core busy | " + " | ".join(cells) + " |")
    if r.core0_ms.get("stub"):
        core0 = r.core0_ms["stub"]
        lines += [
            "",
            "Core 0 in the stub runs, CPU ms per request (the load generator, the stub, the OTLP "
            "receiver, each traced gateway's exporter; the core's capacity is 1000 / rate):",
            "",
            "| process | off | 1 % | 100 % |",
            "|---|---|---|---|",
        ]
        for name in core0["off"]:
            cells = [f"{core0[m][name]:.3f}" for m in MODES]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        exporter = r.exporter_cpu_ms.get("stub", {})
        cells = ["0.000"] + [f"{exporter.get(m, 0.0):.3f}" for m in ("1%", "100%")]
        lines.append("| exporter | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Spans received: {r.gateway_spans} from the 100 % gateway's requests (request spans), "
        f"{r.engine_spans} from the engine; through the stub, {r.stub_spans} request spans for "
        f"the {r.stub_sent_traced} requests the 100 % gateway served (the rest dropped by its "
        "span hand-off or its exporter's queue, as designed when the exporter falls behind).",
        *r.notes,
        END,
    ]
    return "\n".join(lines)


def joined_requests(spans: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(gateway request spans of the 100 % gateway, engine spans, request spans whose engine
    call is the parent of an engine span and which carry the whole identity)."""
    service = SERVICE["100%"]
    engine_parents = {s["parent_span_id"] for s in spans if s["service"] == "vllm"}
    engine_spans = sum(s["service"] == "vllm" and s["name"] == "llm_request" for s in spans)
    calls: dict[str, list[str]] = {}
    for s in spans:
        if s["service"] == service and s["kind"] == 3:  # SPAN_KIND_CLIENT: the engine call
            calls.setdefault(s["parent_span_id"], []).append(s["span_id"])
    roots = [s for s in spans if s["service"] == service and not s["parent_span_id"]]
    joined = sum(
        all(s["attributes"].get(name) for name in IDENTITY)
        and any(call in engine_parents for call in calls.get(s["span_id"], ()))
        for s in roots
    )
    return len(roots), engine_spans, joined


def wait_for_spans(receiver: Any, sent: int, wait_s: float = JOIN_WAIT_S) -> list[dict[str, Any]]:
    """The receiver's spans once the 100 % gateway's requests are all in and the counts have
    stopped growing (bounded)."""
    deadline, last, steady = time.monotonic() + wait_s, (-1, -1), 0
    while True:
        spans = receiver.spans()
        roots, engine, _ = joined_requests(spans)
        steady = steady + 1 if (roots, engine) == last else 0
        last = (roots, engine)
        if (roots >= sent and steady >= 10) or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


def exporters_of(pid: int) -> list[int]:
    """The span exporter processes among a gateway's children."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            if EXPORTER_MODULE.encode() in cmdline:
                found.append(int(child))
    return found


def pin_exporters(pids: dict[str, int]) -> dict[str, int]:
    """Each traced gateway's exporter on EXPORTER_CPUS; the exporter's pid by mode."""
    out = {}
    for mode, pid in pids.items():
        for child in exporters_of(pid):
            os.sched_setaffinity(child, EXPORTER_CPUS)
            out[mode] = child
    return out


def settle(pids: list[int], quiet_s: float = 0.5, limit_s: float = 30.0) -> None:
    """Wait until these processes (a traced gateway's exporter, the receiver) have used no CPU
    for `quiet_s`: what they still export from one mode's run is not spent in the next's."""
    deadline = time.monotonic() + limit_s
    last, since = -1.0, time.monotonic()
    while time.monotonic() < deadline:
        used = sum(gs.cpu_seconds(pid) for pid in pids)
        if used != last:
            last, since = used, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.1)


def throughput_runs(
    targets: dict[str, Any],
    pids: dict[str, int],
    exporters: dict[str, int],
    core0_pids: dict[str, int],
    core0: dict[str, dict[str, float]],
    rounds: dict[str, list[float]],
    **load: Any,
) -> tuple[dict[str, Any], dict[str, float], dict[str, float], dict[str, float]]:
    """measure_throughput for the gateways in turn, ROUNDS times over (off, 1 %, 100 %, off,
    ...: the machine's drift over the run falls on every mode alike), each round a
    ROUNDS-th of the count, each run started once the exporters and the receiver are idle
    (what a traced mode's run left them to export is not spent in the next run); per mode,
    the rounds' sum. With the CPU per request (ms) of the
    gateway's own process and of its exporter, and the share of its core the gateway's process
    was busy (near 1: the gateway was the bottleneck; well below: something else was)."""
    from bench.gateway_overhead import Throughput, measure_throughput

    per_round = {**load, "count": max(1, load["count"] // ROUNDS)}
    totals: dict[str, list[float]] = {m: [0, 0, 0.0, 0.0, 0.0] for m in MODES}
    for _ in range(ROUNDS):
        for mode in MODES:
            settle([*exporters.values(), *core0_pids.values()])
            child = exporters.get(mode)
            before = gs.cpu_seconds(child) if child else 0.0
            side = _core0_seconds(core0_pids)
            run = uvloop.run(measure_throughput(targets[mode], pids[mode], **per_round))
            spent = gs.cpu_seconds(child) - before if child else 0.0
            side_now = _core0_seconds(core0_pids)
            per = core0.setdefault(mode, {})
            for name, seconds in side_now.items():  # summed here, per request below
                per[name] = per.get(name, 0.0) + seconds - side[name]
            rounds.setdefault(mode, []).append(run.rps)
            total = totals[mode]
            total[0] += run.requests
            total[1] += run.errors
            total[2] += run.seconds
            total[3] += (run.cpu_s or 0.0) - spent
            total[4] += spent
    runs, cpu, exporter_cpu, busy = {}, {}, {}, {}
    upstream = load["upstream"]
    for mode, (requests, errors, seconds, own, spent) in totals.items():
        runs[mode] = Throughput(mode, upstream, int(requests), int(errors), seconds, own + spent)
        done = max(1.0, requests)
        cpu[mode] = own / done * 1000
        exporter_cpu[mode] = spent / done * 1000
        busy[mode] = own / seconds if seconds else 0.0
        core0[mode] = {name: used / done * 1000 for name, used in core0[mode].items()}
    return runs, cpu, exporter_cpu, busy


def _core0_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of core 0's processes: this one (the load generator; the warm-up
    requests measure_throughput sends count too, here as in the stub) and those named (the
    stub, the receiver)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "load generator": usage.ru_utime + usage.ru_stime,
        **{name: gs.cpu_seconds(pid) for name, pid in pids.items()},
    }


def measure_tracing(args: argparse.Namespace, services: Any, db_url: str) -> TracingResult:
    from bench.gateway_overhead import (
        KINDS,
        LOADGEN_CPUS,
        PROXY_CPUS,
        STUB_CPUS,
        measure_latency,
        point_engine_row,
    )
    from tests.fixtures.otlp_receiver import OtlpReceiver

    started, load_before = time.time(), os.getloadavg()[0]
    receiver = OtlpReceiver(VAR / "spans.otlp").start()
    services.receiver = receiver
    # The receiver (a trace store's stand-in) beside the exporters, off the gateways' core.
    assert receiver.process is not None
    os.sched_setaffinity(receiver.process.pid, EXPORTER_CPUS)
    tiny = gs.tiny_model()
    key = secrets.token_hex(16)
    config = gs.engine_config(
        tiny, VAR, "engine", key, max_loras=2, max_cpu_loras=3, cpu_cores=args.engine_cpus or None
    )
    config.otlp_traces_endpoint = receiver.traces_endpoint
    services.engine = EngineProcess(config).start()
    redis_url = os.environ.get("BENCH_GATEWAY_REDIS_URL", "redis://127.0.0.1:6379/12")
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys={"bench-engine": key})
    gs.django_setup(env, db_url)
    tenancy = gs.seed_tenancy(tiny)
    services.engine.wait_ready(timeout=gs.READY_TIMEOUT_S)
    gs.seed_resident_adapter(services.engine, key, tenancy, VAR, max_concurrent_requests=64)
    from adapters.access import AccessContext
    from adapters.services.aliases import alias_set

    alias_set(
        access=AccessContext.for_user(tenancy.owner),
        tenant=tenancy.tenant,
        name=ALIAS,
        targets=[{"version": "support@1", "weight": 100}],
    )
    services.stub, stub_url = gs.start_stub(VAR / "stub.log", cpus=STUB_CPUS)
    auth = {"authorization": f"Bearer {tenancy.token}"}
    targets, pids = {}, {}
    services.gateways = []
    for mode, extra in MODES.items():
        traced = (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_SERVICE_NAME": SERVICE[mode],
                **extra,
            }
            if extra
            else {}
        )
        log = VAR / f"gateway-{mode.rstrip('%')}.log"
        proc, url = gs.start_gateway(env, log, cpus=PROXY_CPUS, extra=traced)
        services.gateways.append(proc)
        targets[mode] = gs.Target(mode, url, ALIAS, auth)
        pids[mode] = proc.pid
    load = {"count": args.load_requests, "concurrency": args.concurrency}
    stub_load = {"count": args.stub_requests, "concurrency": args.concurrency}
    latency: dict[str, dict[str, dict[str, gs.Summary]]] = {}
    throughput: dict[str, dict[str, float]] = {}
    cpu: dict[str, dict[str, float]] = {}
    exporter_cpu: dict[str, dict[str, float]] = {}
    busy: dict[str, dict[str, float]] = {}
    core0: dict[str, dict[str, float]] = {}
    round_rps: dict[str, dict[str, list[float]]] = {}
    latency_cpus = {int(PROXY_CPUS)} if args.engine_cpus else LOADGEN_CPUS
    with gs.pinned_to(latency_cpus):
        # One request each first: a traced gateway starts its span exporter at its first.
        uvloop.run(measure_latency(targets, requests=1, warmup=0, kinds=KINDS[:1]))
        exporters = pin_exporters({m: pids[m] for m in SERVICE})
        raw = uvloop.run(measure_latency(targets, requests=args.requests, warmup=args.warmup))
    latency["engine"] = _summaries(raw, KINDS)
    with gs.pinned_to(LOADGEN_CPUS):
        runs, cpu["engine"], exporter_cpu["engine"], busy["engine"] = throughput_runs(
            targets,
            pids,
            exporters,
            {"receiver": receiver.process.pid},
            {},
            round_rps.setdefault("engine", {}),
            upstream="engine",
            **load,
        )
    throughput["engine"] = {m: t.rps for m, t in runs.items()}
    # Every request the 100 % gateway sent the real engine: latency (warm-up too) and load.
    warm = ROUNDS * max(50, (args.load_requests // ROUNDS) // 10)  # each round warms
    sent = len(KINDS) * (args.requests + args.warmup) + 1 + runs["100%"].requests + warm
    spans = wait_for_spans(receiver, sent)
    roots, engine_spans, joined = joined_requests(spans)
    point_engine_row("bench-engine", stub_url)
    # The stub answers whole: the kinds that do not stream.
    with gs.pinned_to(latency_cpus):
        raw = uvloop.run(
            measure_latency(targets, requests=args.requests, warmup=args.warmup, kinds=KINDS[:2])
        )
    latency["stub"] = _summaries(raw, KINDS[:2])
    with gs.pinned_to(LOADGEN_CPUS):
        runs, cpu["stub"], exporter_cpu["stub"], busy["stub"] = throughput_runs(
            targets,
            pids,
            exporters,
            {"stub": services.stub.pid, "receiver": receiver.process.pid},
            core0,
            round_rps.setdefault("stub", {}),
            upstream="stub",
            **stub_load,
        )
    throughput["stub"] = {m: t.rps for m, t in runs.items()}
    # Every request the 100 % gateway served through the stub: latency (warm-up too) and load.
    stub_warm = ROUNDS * max(50, (args.stub_requests // ROUNDS) // 10)
    stub_sent = 2 * (args.requests + args.warmup) + runs["100%"].requests + stub_warm
    stub_roots, _, _ = joined_requests(wait_for_spans(receiver, roots + stub_sent, wait_s=30))
    point_engine_row("bench-engine", services.engine.base_url)
    return TracingResult(
        latency=latency,
        throughput=throughput,
        sent_traced=sent,
        joined=joined,
        gateway_spans=roots,
        engine_spans=engine_spans,
        requests=args.requests,
        load_requests=args.load_requests,
        stub_requests=args.stub_requests,
        concurrency=args.concurrency,
        machine=gs.machine_note(load_before, [services.engine]),
        seconds=time.time() - started,
        cpu_ms=cpu,
        exporter_cpu_ms=exporter_cpu,
        gateway_busy=busy,
        stub_sent_traced=stub_sent,
        stub_spans=stub_roots - roots,
        core0_ms={"stub": core0},
        round_rps=round_rps,
    )


def _summaries(raw: dict[str, dict[str, list[gs.Sample]]], kinds: Any) -> dict[str, Any]:
    return {
        label: {mode: gs.summarize(samples, ttft=stream) for mode, samples in raw[label].items()}
        for label, _chat, stream, _n in kinds
    }


def save(result: TracingResult) -> None:
    (VAR / "result.json").write_text(json.dumps(asdict(result), indent=2, default=str))


def load_result() -> TracingResult:
    data = json.loads((VAR / "result.json").read_text())
    data["latency"] = {
        upstream: {
            kind: {mode: gs.Summary(**s) for mode, s in per.items()} for kind, per in kinds.items()
        }
        for upstream, kinds in data["latency"].items()
    }
    return TracingResult(**data)
