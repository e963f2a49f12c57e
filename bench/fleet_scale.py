"""The fleet controller's planning cost at scale, in process: N engines x M versions.

    .venv/bin/python -m bench.fleet_scale [--engines 100] [--versions 10000] [--seed 1]
        [--requests 5000] [--repeat 3] [--write-docs]

Builds a seeded fleet (bench/fleet_world.py: ~M/20 tenants bound to pools of 10 engines, Zipf
popularity per pool, keep-warm, pinned and on-demand wishes up to ~1.5x each engine's cache),
converges every engine to its steady state with the controller's own planner, then times one
fleet pass (every engine planned once) per scenario:

  steady      nothing changed: every engine should plan 0 actions (0 engine calls);
  restart     10% of the engines came back empty;
  miss-storm  one request per engine for a version of its pool that is not loaded (`incoming`);
  release     1% more versions released, each wished on-demand on one engine of its pool;
  disable     1% of the versions disabled everywhere (no longer wanted; loaded copies go).

Per engine: the snapshot built from rows (controller.build_snapshot's loop over plain objects)
and workers.controller_plan.plan_converge, CPU (time.process_time) and wall. Per pool: the
DemandTracker from the pool's request history (parsed as shared_state.demand_history does).
Not included: database queries, Redis round trips, the engine's residency call, carrying the
actions out. The fleet pass total is the sum of all three over engines and pools.
"""

from __future__ import annotations

import argparse
import copy
import functools
import math
import os
import platform
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.docs_section import markers, write_section
from bench.fleet_world import (
    CHANGES,
    Fleet,
    SimEngine,
    build_fleet,
    build_snapshot,
    build_tracker,
    carry_out,
)
from workers.cache_policy import DemandTracker, PolicyParams
from workers.controller_plan import WANT_ON_DEMAND, EnginePlan, plan_converge

BEGIN, END = markers("fleet-scale")
GOAL_FLEET_CPU_S = 2.0
PERIOD_S = 30.0  # the reconcile period between passes
SETTLE_PASSES = 12
SCENARIOS = ("steady", "restart", "miss-storm", "release", "disable")


@dataclass
class EngineTiming:
    engine: str
    snapshot_cpu: float
    snapshot_wall: float
    plan_cpu: float
    plan_wall: float
    actions: int
    kinds: Counter[str]
    skipped: int


@dataclass
class PassResult:
    engines: list[EngineTiming] = field(default_factory=list)
    tracker_cpu: dict[str, float] = field(default_factory=dict)  # per pool
    tracker_wall: dict[str, float] = field(default_factory=dict)
    settle_passes: int = 0  # further passes until every engine plans 0 actions
    settle_kinds: Counter[str] = field(default_factory=Counter)  # what those passes did
    unsettled: list[str] = field(default_factory=list)

    def fleet_cpu(self) -> float:
        per_engine = sum(t.snapshot_cpu + t.plan_cpu for t in self.engines)
        return per_engine + sum(self.tracker_cpu.values())

    def fleet_wall(self) -> float:
        per_engine = sum(t.snapshot_wall + t.plan_wall for t in self.engines)
        return per_engine + sum(self.tracker_wall.values())


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def trackers(fleet: Fleet, result: PassResult | None = None) -> dict[str, DemandTracker]:
    out = {}
    for pool in fleet.pools:
        out[pool], cpu, wall = _timed(functools.partial(build_tracker, fleet, pool))
        if result is not None:
            result.tracker_cpu[pool], result.tracker_wall[pool] = cpu, wall
    return out


def plan_engine(
    fleet: Fleet,
    engine: SimEngine,
    demand: DemandTracker,
    *,
    now: float,
    incoming: str | None = None,
) -> tuple[EnginePlan, EngineTiming]:
    """One engine's part of a converge pass, as controller._converge_locked runs it."""
    if incoming is not None:
        engine.wanted.setdefault(incoming, WANT_ON_DEMAND)
    snap, s_cpu, s_wall = _timed(lambda: build_snapshot(fleet, engine, now=now))
    plan, p_cpu, p_wall = _timed(
        lambda: plan_converge(
            snap, demand, wanted=engine.wanted, incoming=incoming, params=PolicyParams()
        )
    )
    kinds = Counter(type(a).__name__.lower() for a in plan.actions)
    timing = EngineTiming(
        engine.name, s_cpu, s_wall, p_cpu, p_wall, len(plan.actions), kinds, len(plan.skipped)
    )
    return plan, timing


def settle(
    fleet: Fleet, demand: dict[str, DemandTracker], *, start: float
) -> tuple[int, list[str], Counter[str]]:
    """Converge passes every PERIOD_S until no engine has anything to do (or give up): the
    passes that had actions, the engines still busy, and the actions taken."""
    now, kinds = start, Counter[str]()
    for passes in range(SETTLE_PASSES):
        busy = []
        for engine in fleet.engines:
            plan, timing = plan_engine(fleet, engine, demand[engine.pool], now=now)
            if plan.actions:
                busy.append(engine.name)
                kinds.update(timing.kinds)
                carry_out(fleet, engine, plan, now=now)
        if not busy:
            return passes, [], kinds
        now += PERIOD_S
    return SETTLE_PASSES, busy, kinds


def steady_fleet(engines: int, versions: int, seed: int, requests: int) -> tuple[Fleet, int]:
    """The fleet after it came up empty an hour ago and the controller converged it (and the
    passes that took)."""
    fleet = build_fleet(engines=engines, versions=versions, seed=seed, requests=requests)
    passes, unsettled, _ = settle(fleet, trackers(fleet), start=fleet.now - 3600.0)
    if unsettled:
        raise RuntimeError(f"no steady state after {passes} passes: {unsettled[:5]}")
    return fleet, passes


def run_scenario(steady: Fleet, name: str, seed: int) -> tuple[PassResult, set[str]]:
    """One fleet pass after the scenario's change; then passes until it has settled again."""
    fleet = copy.deepcopy(steady)
    restarted_before = {e.name for e in fleet.engines if e.held}
    incoming = CHANGES[name](fleet, seed)
    changed = {e.name for e in fleet.engines if not e.held} & restarted_before
    result = PassResult()
    demand = trackers(fleet, result)
    plans = []
    for engine in fleet.engines:
        plan, timing = plan_engine(
            fleet, engine, demand[engine.pool], now=fleet.now, incoming=incoming.get(engine.name)
        )
        result.engines.append(timing)
        plans.append((engine, plan))
    for engine, plan in plans:
        carry_out(fleet, engine, plan, now=fleet.now)
    result.settle_passes, result.unsettled, result.settle_kinds = settle(
        fleet, demand, start=fleet.now + PERIOD_S
    )
    return result, changed


def _q(values: list[float], q: float) -> float:
    """Nearest-rank quantile."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def summarize(result: PassResult, engines: set[str] | None = None) -> dict[str, Any]:
    rows = [t for t in result.engines if engines is None or t.engine in engines]
    plan_ms = [1000 * t.plan_cpu for t in rows]
    kinds: Counter[str] = Counter()
    for t in rows:
        kinds.update(t.kinds)
    return {
        "engines": len(rows),
        "actions": sum(t.actions for t in rows),
        "engines_with_actions": sum(1 for t in rows if t.actions),
        "max_actions_per_engine": max((t.actions for t in rows), default=0),
        "kinds": dict(sorted(kinds.items())),
        "skipped": sum(t.skipped for t in rows),
        "plan_cpu_s": sum(t.plan_cpu for t in rows),
        "snapshot_cpu_s": sum(t.snapshot_cpu for t in rows),
        "plan_cpu_ms": {"p50": _q(plan_ms, 0.5), "p95": _q(plan_ms, 0.95), "max": max(plan_ms)},
        "plan_wall_ms_p50": _q([1000 * t.plan_wall for t in rows], 0.5),
        "snapshot_cpu_ms_p50": _q([1000 * t.snapshot_cpu for t in rows], 0.5),
    }


def run(
    *, engines: int, versions: int, seed: int, requests: int = 5_000, repeat: int = 1
) -> dict[str, Any]:
    """Every scenario, `repeat` times each (the run with the median fleet CPU is reported)."""
    started = time.perf_counter()
    steady, passes = steady_fleet(engines, versions, seed, requests)
    out: dict[str, Any] = {
        "config": {"engines": engines, "versions": versions, "seed": seed, "requests": requests},
        "fleet": {
            "pools": len(steady.pools),
            "tenants": len(steady.tenant_quota),
            "cpu_slots": sum(e.cpu_slots for e in steady.engines),
            "wanted": sum(len(e.wanted) for e in steady.engines),
            "resident": sum(len(e.held) for e in steady.engines),
            "pinned": sum(1 for e in steady.engines for r in e.held.values() if r.pinned),
            "passes_from_empty": passes,
        },
        "scenarios": {},
    }
    for name in SCENARIOS:
        runs = [run_scenario(steady, name, seed) for _ in range(max(1, repeat))]
        runs.sort(key=lambda r: r[0].fleet_cpu())
        result, changed = runs[len(runs) // 2]
        tracker_ms = [1000 * v for v in result.tracker_cpu.values()]
        out["scenarios"][name] = {
            "fleet_cpu_s": result.fleet_cpu(),
            "fleet_wall_s": result.fleet_wall(),
            "fleet_cpu_s_runs": [r.fleet_cpu() for r, _ in runs],
            "tracker_cpu_ms": {
                "per_pool_p50": statistics.median(tracker_ms),
                "sum": sum(tracker_ms),
            },
            # workers.controller builds the tracker in every engine's pass, not once per pool:
            "fleet_cpu_s_tracker_per_engine": result.fleet_cpu()
            + sum(result.tracker_cpu[e.pool] for e in steady.engines)
            - sum(result.tracker_cpu.values()),
            "all": summarize(result),
            "changed": summarize(result, changed) if changed else None,
            "settle_passes": result.settle_passes,
            "settle_kinds": dict(sorted(result.settle_kinds.items())),
            "unsettled": result.unsettled,
        }
    out["seconds"] = time.perf_counter() - started
    return out


def _ms(d: dict[str, float]) -> str:
    return f"{d['p50']:.2f} / {d['p95']:.2f} / {d['max']:.2f}"


def render(r: dict[str, Any], command: str) -> str:
    c, f = r["config"], r["fleet"]
    worst = max(s["fleet_cpu_s"] for s in r["scenarios"].values())
    today = max(r["scenarios"].values(), key=lambda s: s["fleet_cpu_s_tracker_per_engine"])
    worst_today = today["fleet_cpu_s_tracker_per_engine"]
    share = 1 - (today["all"]["plan_cpu_s"] + today["all"]["snapshot_cpu_s"]) / worst_today
    steady = r["scenarios"]["steady"]["all"]
    lines = [
        BEGIN,
        "## Fleet controller: planning cost at scale (simulated in process)",
        "",
        f"Command (one run produces every number below): `{command}`",
        "",
        f"Machine: {os.cpu_count()} cores shared with other work, Python "
        f"{platform.python_version()}; CPU time is `time.process_time()` of the one process, "
        "which other load on the machine does not inflate (wall in brackets where shown). "
        f"Each scenario ran {len(r['scenarios']['steady']['fleet_cpu_s_runs'])} times from the "
        "same steady fleet; the run with the median fleet CPU is shown. Run took "
        f"{r['seconds']:.0f} s.",
        "",
        f"Fleet (`bench/fleet_world.py`, seed {c['seed']}): {c['engines']} engines in "
        f"{f['pools']} pools (max_loras 4-16, max_cpu_loras 16-64, max_lora_rank 64), "
        f"{c['versions']:,} versions of {f['tenants']} tenants (gold/silver/bronze, ranks 8-64), "
        f"{c['requests']:,} recent requests per pool (Zipf 1.0). Wishes: {f['wanted']:,} over "
        f"{f['cpu_slots']:,} cache slots (keep-warm on every engine of a pool, a few pins within "
        "quotas, on-demand up to ~1.5x each cache). Steady state = what the controller's own "
        f"passes converged to from empty engines ({f['passes_from_empty']} passes with actions); "
        f"{f['resident']:,} resident, {f['pinned']} pinned. In-flight counts are 0; each engine "
        "has a fixed `busy_peak` (0-3). The engine model carries actions out one after another "
        "as vLLM does (a load or warm-up takes a GPU slot, its LRU demotes the least recently "
        "used); the last column counts the further passes that still had actions.",
        "",
        "| scenario | engines with actions | actions (kinds) | plan CPU ms per engine "
        "p50 / p95 / max | snapshot CPU ms p50 | trackers CPU ms (sum over pools) | "
        "fleet pass CPU s (wall) | passes to settle after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in r["scenarios"].items():
        a = s["all"]
        kinds = ", ".join(f"{k} {v}" for k, v in a["kinds"].items()) or "-"
        did = ", ".join(f"{k} {v}" for k, v in s["settle_kinds"].items())
        settle = f"{s['settle_passes']}" + (f" ({did})" if did else "")
        if s["unsettled"]:
            settle += f", {len(s['unsettled'])} engines still busy"
        lines.append(
            f"| {name} | {a['engines_with_actions']} / {a['engines']} | {a['actions']} ({kinds}) "
            f"| {_ms(a['plan_cpu_ms'])} | {a['snapshot_cpu_ms_p50']:.2f} "
            f"| {s['tracker_cpu_ms']['sum']:.0f} | **{s['fleet_cpu_s']:.3f}** "
            f"({s['fleet_wall_s']:.3f}) | {settle} |"
        )
    restart = r["scenarios"]["restart"]["changed"]
    if restart:
        lines += [
            "",
            f"Restarted engines alone ({restart['engines']}): {restart['actions']} actions "
            f"(at most {restart['max_actions_per_engine']} on one engine), plan CPU ms "
            f"p50 / p95 / max {_ms(restart['plan_cpu_ms'])}.",
        ]
    if r["scenarios"]["restart"]["settle_passes"]:
        lines += [
            "",
            "After the restart one more pass still had actions (last column): within one plan "
            "the planner's GPU model gives every load the same last-use time and lets Warm and "
            "Pin touch nothing, so it can believe a version it just loaded or warmed was pushed "
            "back to the CPU by a later activation and skip its policy pin; the engine (LRU, one "
            "action after another) keeps it in its GPU slot, and the next pass pins it "
            "(traced for seed 1).",
        ]
    name, top = max(r["scenarios"].items(), key=lambda kv: kv[1]["fleet_cpu_s"])
    per_pool = top["tracker_cpu_ms"]["per_pool_p50"]
    lines += [
        "",
        f"Where the CPU goes ({name}, the costliest pass): DemandTrackers "
        f"{top['tracker_cpu_ms']['sum'] / 1000:.3f} s ({per_pool:.1f} ms per pool of "
        f"{c['requests']:,} requests), snapshots {top['all']['snapshot_cpu_s']:.3f} s, "
        f"plan_converge {top['all']['plan_cpu_s']:.3f} s. With the goal met the planner was "
        "left as it is (cProfile: no hot spot; its time is spread over check_plan, "
        "dataclasses.replace and the policy's scoring).",
    ]
    lines += [
        "",
        "Included: the per-pool DemandTracker (parsing the Redis history as "
        "`shared_state.demand_history` does, then `DemandTracker.from_history`), each engine's "
        "snapshot from its rows (`controller.build_snapshot`'s loop over plain objects) and "
        "`plan_converge`. Not included: database queries, Redis and engine round trips, "
        "carrying actions out (each engine's pass runs on its own node's worker in production; "
        "the sum is the CPU the whole fleet spends).",
        "",
        f"Goal: a fleet pass under {GOAL_FLEET_CPU_S:.0f} s of CPU, and engine calls only for "
        f"changes. Result: worst fleet pass {worst:.3f} s CPU "
        f"({'met' if worst < GOAL_FLEET_CPU_S else 'NOT met'}); steady state "
        f"{steady['actions']} actions on {steady['engines']} engines "
        f"({'met' if steady['actions'] == 0 else 'NOT met'}). The controller keeps one "
        "tracker per pool in each worker process and feeds it only the requests recorded since "
        "its last pass (`workers.engine_view.pool_policy`), so a pass replays a history only "
        "in a fresh process; replaying it in every engine's pass instead would make the worst "
        f"pass {worst_today:.3f} s CPU "
        f"({'under' if worst_today < GOAL_FLEET_CPU_S else '**over**'} the goal), {share:.0%} "
        "of it the same pool's request history replayed once per engine.",
        END,
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engines", type=int, default=100)
    parser.add_argument("--versions", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=5_000, help="recent requests per pool")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each scenario")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    result = run(
        engines=args.engines,
        versions=args.versions,
        seed=args.seed,
        requests=args.requests,
        repeat=args.repeat,
    )
    command = (
        f".venv/bin/python -m bench.fleet_scale --engines {args.engines} --versions "
        f"{args.versions} --seed {args.seed} --requests {args.requests} --repeat {args.repeat}"
    )
    section = render(result, command)
    print(section)
    if args.write_docs:
        write_section("fleet-scale", section)


if __name__ == "__main__":
    main()
