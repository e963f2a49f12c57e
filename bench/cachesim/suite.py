"""Run every policy on every scenario, in both modes, on two processes; results as plain dicts."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.cachesim.policies import make_policy
from bench.cachesim.scenarios import SCENARIOS, Scenario
from bench.cachesim.sim import SimConfig, simulate
from bench.cachesim.trace import dumps, generate

POLICY_ORDER = ("lru", "lfu", "gdsf", "chameleon", "portal", "portal-noslo", "belady", "a0")
CCDF_SCENARIO = "skewed-2x"
CCDF_POLICIES = ("lru", "lfu", "portal", "belady")


@dataclass(frozen=True)
class Job:
    scenario: Scenario
    policy: str
    sequential: bool


def _run(job: Job) -> tuple[str, str, bool, dict[str, Any], float]:
    sc = job.scenario
    trace = generate(sc.spec)
    config = SimConfig(
        sc.gpu_slots, sc.cpu_slots, sequential=job.sequential, pin_quota=sc.pin_quota
    )
    started = time.process_time()
    m = simulate(trace, make_policy(job.policy), config)
    metrics = m.to_dict()
    if sc.name == CCDF_SCENARIO and not job.sequential and job.policy in CCDF_POLICIES:
        metrics["ttft_s"] = m.total.ttft_s
    return sc.name, job.policy, job.sequential, metrics, time.process_time() - started


def run_suite(
    *, requests: int | None = None, workers: int = 2, trace_dir: Path | None = None
) -> dict[str, Any]:
    """{"sequential"|"concurrent": {scenario: {policy: metrics}}, "ttfts": ..., "cpu_s": ...}."""
    scenarios = [
        replace(s, spec=replace(s.spec, requests=requests)) if requests else s for s in SCENARIOS
    ]
    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
        for s in scenarios:
            (trace_dir / f"{s.name}.jsonl").write_text(dumps(generate(s.spec)), encoding="utf-8")
    jobs = [Job(s, p, seq) for seq in (True, False) for s in scenarios for p in POLICY_ORDER]
    # The slow ones first, so the two processes finish together.
    jobs.sort(key=lambda j: not j.policy.startswith("portal"))
    out: dict[str, Any] = {"sequential": {}, "concurrent": {}, "cpu_s": 0.0, "ttfts": {}}
    with ProcessPoolExecutor(workers) as pool:
        for name, policy, seq, metrics, cpu_s in pool.map(_run, jobs):
            mode = "sequential" if seq else "concurrent"
            if "ttft_s" in metrics:
                out["ttfts"][policy] = metrics.pop("ttft_s")
            out[mode].setdefault(name, {})[policy] = metrics
            out["cpu_s"] += cpu_s
    out["scenarios"] = [
        {"name": s.name, "what": s.what, "gpu": s.gpu_slots, "cpu": s.cpu_slots, "spec": s.spec}
        for s in scenarios
    ]
    return out
