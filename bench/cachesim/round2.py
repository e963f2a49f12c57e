"""The second goal set's suite (`make bench-cache2`): every goal's scenarios over several seeds, on two processes.

One job is (goal, case, seed, policy[, router]); each case builds its trace from the seed, so
every policy of a goal sees the same traffic. Results are plain dicts, rendered by
bench.cachesim.round2_report.
"""

from __future__ import annotations

import bisect
import functools
import math
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bench.cachesim import structured as st
from bench.cachesim.policies import Controller, make_policy
from bench.cachesim.policies.scheduled import PortalScheduled
from bench.cachesim.references import PinOracle, online_miss_bound
from bench.cachesim.scenarios import BASE, Scenario, by_name
from bench.cachesim.sim import CostModel, SimConfig, Simulation
from bench.cachesim.trace import TraceRequest, TraceSpec, generate

SEEDS = (1, 2, 3)
Built = tuple[list[TraceRequest], st.Windows]


@dataclass(frozen=True)
class Case:
    goal: str
    name: str
    what: str
    build: Callable[[int], Built]
    policies: tuple[str, ...]
    config: SimConfig
    spec: TraceSpec | None = None  # goal 1's `make bench-cache` scenarios: the spec (its size)
    iid: bool = False  # independent draws from a fixed popularity: the online bound holds
    # Per seed, the online bound on cold requests (mean, sd) where part of the traffic is
    # independent draws (session starts, a launch's background); None: no bound.
    bound: Callable[[int, list[TraceRequest]], tuple[float, float]] | None = None
    routers: tuple[str, ...] = ()  # fleet cases: the engine choices compared, policy `portal`
    # Fleet cases with more adapters than the fleet's cache slots: count the requests' cold
    # floors (references.cold_percentile_floor) for the p99 no engine choice can beat.
    cold_floor: bool = False


def _spec_case(spec: TraceSpec) -> Callable[[int], Built]:
    return lambda seed: (generate(replace(spec, seed=seed)), {})


def _gold_least_popular(spec: TraceSpec) -> Callable[[int], Built]:
    """Gold owns the least popular third of the adapters, bronze the rest."""

    def build(seed: int) -> Built:
        trace = generate(replace(spec, seed=seed, tenants=(("bronze", 1),)))
        counts: dict[str, int] = {}
        for r in trace:
            counts[r.adapter] = counts.get(r.adapter, 0) + 1
        ranked = sorted(counts, key=lambda a: (-counts[a], a))
        gold = set(ranked[len(ranked) - len(ranked) // 3 :])
        return [
            replace(r, tenant="gold0", slo="gold") if r.adapter in gold else r for r in trace
        ], {}

    return build


SEQ = SimConfig(8, 32, sequential=True)
CONC = SimConfig(8, 32)
STRUCT = SimConfig(8, 32, cost=CostModel(prestaged=True))
FLEET = SimConfig(8, 32, engines=4)
REF = ("lru", "a0", "belady")


def _g1_cases(n: int | None) -> list[Case]:
    """`make bench-cache`'s scenarios, at their size unless `n` is given."""
    out = []
    pols = (*REF, "portal-noslo", "portal", "pin-oracle")
    for name in ("skewed-2x", "flat-2x", "skewed-8x", "slora-power-8x", "bursty-2x"):
        s = _sized(by_name(name), n)
        out.append(Case("1+3", name, s.what, _spec_case(s.spec), pols, SEQ, s.spec, iid=True))
    for name in ("mixed-ranks-2x", "drift-2x"):
        s = _sized(by_name(name), n)
        iid = name != "drift-2x"
        out.append(Case("1+3", name, s.what, _spec_case(s.spec), pols, SEQ, s.spec, iid=iid))
    return out


def _sized(s: Scenario, n: int | None) -> Scenario:
    return replace(s, spec=replace(s.spec, requests=n)) if n else s


def _g2_cases(n: int) -> list[Case]:
    base = replace(BASE, requests=n)
    pols = (*REF, "portal-noslo", "portal")
    third = replace(base, tenants=(("gold", 1), ("silver", 1), ("bronze", 1)))
    return [
        Case("2", "gold-sixth", "Zipf 1.0, gold 1 of 6 tenants", _spec_case(base), pols, CONC),
        Case(
            "2",
            "gold-third",
            "Zipf 1.0, gold a third of the adapters",
            _spec_case(third),
            pols,
            CONC,
        ),
        Case(
            "2",
            "gold-least-popular",
            "Zipf 1.0, gold owns the least popular third",
            _gold_least_popular(base),
            pols,
            CONC,
        ),
        Case(
            "2",
            "flat-gold-third",
            "uniform popularity, gold a third of the adapters",
            _spec_case(replace(third, popularity="uniform")),
            pols,
            CONC,
        ),
    ]


def _zipf_bound(draws: int) -> tuple[float, float]:
    """Online bound for `draws` independent Zipf 1.0 draws over 64 adapters on 32 slots."""
    return online_miss_bound(TraceSpec(adapters=64, requests=draws, zipf_s=1.0), 32)


def _changing_bound(
    trace: list[TraceRequest], shares_at: Callable[[float], np.ndarray], slots: int
) -> tuple[float, float]:
    """Online bound where the popularity changes in time but each request is still an
    independent draw from the one in force (known to the policy): at least 1 - top_C(p_t) per
    request, summed; one standard deviation beside it."""
    misses = [1.0 - float(shares_at(r.t)[:slots].sum()) for r in trace]
    return sum(misses), math.sqrt(sum(q * (1.0 - q) for q in misses))


def _g4_cases(n: int) -> list[Case]:
    pols = (*REF, "portal", "portal-sched")
    c = st.Common(requests=n)
    return [
        Case(
            "4",
            "sessions",
            "64 adapters, sessions of 1 + geometric turns (mean 4), 2-20 s apart, 1 request/s",
            lambda seed: st.sessions(st.SessionSpec(common=replace(c, seed=seed))),
            pols,
            STRUCT,
            bound=lambda seed, _trace: _zipf_bound(
                st.session_starts(st.SessionSpec(common=replace(c, seed=seed)))
            ),
        ),
        Case(
            "4",
            "business-hours",
            "3 zones x 29 adapters open 40% of a 1 h day, 8 always on (20%); top 8 of each "
            "zone on a preload_on_business_hours schedule",
            lambda seed: st.business_hours(
                st.BusinessHoursSpec(common=replace(c, adapters=96, seed=seed))
            ),
            pols,
            STRUCT,
            # the popularity of the zones open at each request's time, known in advance
            bound=lambda seed, trace: _changing_bound(
                trace,
                functools.partial(
                    st.business_shares,
                    st.BusinessHoursSpec(common=replace(c, adapters=96, seed=seed)),
                ),
                STRUCT.cpu_slots,
            ),
        ),
        Case(
            "4",
            "launch",
            "Zipf 1.0 over 64 adapters; after 30% of the trace a new adapter ramps to 15% of "
            "traffic in 5 min, kept warm from its release",
            lambda seed: st.launch(st.LaunchSpec(common=replace(c, seed=seed))),
            pols,
            STRUCT,
            # the 64 stationary adapters' requests, even with all 32 slots theirs
            bound=lambda seed, trace: _zipf_bound(
                sum(1 for r in trace if r.adapter != f"bronze1--a{c.adapters:03d}")
            ),
        ),
    ]


def _g5_cases(n: int) -> list[Case]:
    # Four times the others' size: the fleet's first loads (one per adapter per engine) must be
    # well under 1% of the requests, or they alone set p99 whatever the routing.
    n = 4 * n
    routers = ("round-robin", "residency-first", "portal")
    return [
        Case(
            "5",
            "fleet-fits",
            f"4 engines, 128 adapters (Zipf 1.0) on 4 x 32 cache slots, 4 requests/s, {n} requests",
            _spec_case(replace(BASE, adapters=128, rate=4.0, requests=n)),
            REF,
            FLEET,
            routers=routers,
        ),
        Case(
            "5",
            "fleet-8x",
            f"4 engines, 256 adapters (Zipf 1.0) on 4 x 32 cache slots, 4 requests/s, {n} requests",
            _spec_case(replace(BASE, adapters=256, rate=4.0, requests=n)),
            REF,
            FLEET,
            spec=replace(BASE, adapters=256, rate=4.0, requests=n),
            routers=routers,
            cold_floor=True,
        ),
    ]


def _g6_cases(n: int) -> list[Case]:
    # goal 2's sustained overload too: gold is 1 of 6 tenants here, as in skewed-2x
    pols = (*REF, "portal-noslo", "portal")
    return [
        Case(
            "6",
            f"overload-{rate:g}x",
            f"Zipf 1.0, 64 adapters, {rate:g} requests/s (one engine serves about 2)",
            _spec_case(replace(BASE, rate=rate, requests=n)),
            pols,
            CONC,
        )
        for rate in (3.0, 5.0)
    ] + [
        Case(
            "6",
            "overload-bursty",
            "Zipf 1.0, Gamma arrivals cv 4",
            _spec_case(replace(by_name("bursty-2x").spec, requests=n)),
            pols,
            CONC,
        )
    ]


def cases(concurrent_requests: int, sequential_requests: int | None = None) -> list[Case]:
    """Every case; names are unique (jobs find their case by name)."""
    n = concurrent_requests
    return [
        *_g1_cases(sequential_requests),
        *_g2_cases(n),
        *_g4_cases(n),
        *_g5_cases(n),
        *_g6_cases(n),
    ]


def _policy(name: str, windows: st.Windows) -> Controller:
    if name == "portal-sched":
        return PortalScheduled(windows)
    if name == "pin-oracle":
        return PinOracle()
    return make_policy(name)


@dataclass(frozen=True)
class Job:
    case: str  # cases are rebuilt in the worker by name: their trace builders do not pickle
    requests: int
    sequential_requests: int | None
    seed: int
    policy: str
    router: str = "portal"


def _case(job: Job) -> Case:
    return next(c for c in cases(job.requests, job.sequential_requests) if c.name == job.case)


def _run(job: Job) -> tuple[str, int, str, dict[str, Any], float]:
    case = _case(job)
    trace, windows = case.build(job.seed)
    config = replace(case.config, router=job.router)
    started = time.process_time()
    sim = Simulation(trace, _policy(job.policy, windows), config)
    metrics = sim.run().to_dict()
    if config.engines > 1:
        metrics["adapters_per_engine"] = [len(s) for s in sim.served]
    if case.bound is not None:
        metrics["online_bound"] = case.bound(job.seed, trace)
    if case.cold_floor and case.spec is not None:
        metrics["cold_floor"] = cold_floor_counts(trace, case.spec, config)
    label = job.policy if job.router == "portal" else f"{job.policy}@{job.router}"
    return case.name, job.seed, label, metrics, time.process_time() - started


FLOOR_GRID_MS = 400  # cold floors counted at every whole millisecond below this


def cold_floor_counts(
    trace: list[TraceRequest], spec: TraceSpec, config: SimConfig
) -> dict[str, Any]:
    """What goal 5's p99 floor needs from one trace: the share of requests that must be cold
    on the whole fleet (online bound over every engine's cache slots) and, for each whole
    millisecond x, how many requests would take at least x ms if cold (load from the node disk,
    copy into a GPU slot, prefill; no fetch from the object store, no queueing)."""
    cost = config.cost
    slots = config.engines * config.cpu_slots
    miss = online_miss_bound(replace(spec, requests=1), slots)[0]
    floors = sorted(
        math.floor(
            1000
            * (
                cost.cold_s(r.size_bytes)
                + cost.move_s(r.size_bytes)
                + r.prompt_tokens / cost.prefill_tokens_per_s
            )
        )
        for r in trace
    )
    at_least = [len(floors) - bisect.bisect_left(floors, x) for x in range(FLOOR_GRID_MS)]
    return {"miss": miss, "requests": len(trace), "at_least_ms": at_least}


def jobs_of(
    all_cases: list[Case], requests: int, seq: int | None, seeds: tuple[int, ...]
) -> list[Job]:
    out = []
    for c in all_cases:
        for seed in seeds:
            out += [Job(c.name, requests, seq, seed, p) for p in c.policies]
            out += [Job(c.name, requests, seq, seed, "portal", r) for r in c.routers]
    # The slow ones first, so the processes finish together.
    out.sort(key=lambda j: not j.policy.startswith("portal"))
    return out


def run_round2(
    *,
    seeds: tuple[int, ...] = SEEDS,
    requests: int = 5_000,
    sequential_requests: int | None = None,
    workers: int = 2,
    only: tuple[str, ...] = (),
    names: tuple[str, ...] = (),
) -> dict[str, Any]:
    """{"results": {case: {policy: {seed: metrics}}}, "cases": [...], "cpu_s": ...}.

    `requests` sizes the concurrent cases; goal 1's sequential ones keep the size of `make
    bench-cache`'s scenarios unless `sequential_requests` is given. `names` keeps only those
    cases; `only` keeps the cases of those goals ("1+3", "2", "4", "5", "6").
    """
    all_cases = [
        c
        for c in cases(requests, sequential_requests)
        if (not only or c.goal in only) and (not names or c.name in names)
    ]
    out: dict[str, Any] = {"results": {}, "cpu_s": 0.0, "seeds": list(seeds)}
    with ProcessPoolExecutor(workers) as pool:
        for case, seed, label, metrics, cpu_s in pool.map(
            _run, jobs_of(all_cases, requests, sequential_requests, seeds)
        ):
            by_seed = out["results"].setdefault(case, {}).setdefault(label, {})
            by_seed[str(seed)] = metrics
            out["cpu_s"] += cpu_s
    out["cases"] = [
        {
            "goal": c.goal,
            "name": c.name,
            "what": c.what,
            "requests": c.spec.requests if c.spec else requests,
            "bound": online_miss_bound(c.spec, c.config.cpu_slots) if c.iid and c.spec else None,
        }
        for c in all_cases
    ]
    return out
