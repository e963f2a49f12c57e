"""Service classes on saturated engines, simulated with the gateway's own policy code
(gateway.class_policy: the fair shares, weighted fair queueing over classes, the shed decision,
the drain meter), classes off (today's round-robin between tenants, no shedding) against classes
on, in one run, on the same seeded trace.

The trace: three tenants (gold, silver, bronze), offered load split by a mix, each with hot adapters and
cold ones (a cold request first waits for its adapter's load, holding no slot, then queues with
its class), Poisson arrivals at 1.0x, 1.5x and 2.0x of the two engines' capacity (slots / mean
service time), and gold alone at its 1.0x rate as the reference. A request's TTFT here is its
wait for a slot plus its load (cold) plus a fixed prefill. A request that waits past the time
budget is a timeout (an error). Goodput: tokens of answers that started within their class's
bound. What it does not model: the engines' own batching (service time does not grow with the
batch), the gateway's overhead, replicas (the admission script's shares are the same arithmetic).
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
from collections import defaultdict, deque
from dataclasses import dataclass, field

from bench.docs_section import write_section
from gateway.class_policy import (
    DEFAULT_PLANS,
    ClassTurns,
    DrainMeter,
    expected_wait_s,
    lower_class_holds,
    may_take,
    plans_by_name,
    should_shed,
)

PLANS = plans_by_name(DEFAULT_PLANS)
CLASSES = ("gold", "silver", "bronze")
ENGINES, SLOTS = 2, 8
SERVICE_S = 1.0  # mean time a request holds a slot (exponential)
LOAD_S = 0.5  # a cold adapter's load
COLD_SHARE = 0.1
PREFILL_S = 0.02
BUDGET_S = 30.0  # the request's time budget (GATEWAY_REQUEST_TIMEOUT_SECONDS)
TOKENS = 64  # completion tokens of every answer
CAPACITY_RPS = ENGINES * SLOTS / SERVICE_S


@dataclass
class Request:
    at: float
    klass: str
    tenant: int
    service_s: float
    cold: bool
    ready: float = 0.0  # when it may queue (after its load)


@dataclass
class Engine:
    running: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    queues: dict[str, deque[Request]] = field(default_factory=dict)  # by class, or by tenant
    turns: ClassTurns = field(default_factory=ClassTurns)
    rr: deque[str] = field(default_factory=deque)
    drained: int = 0
    meter: DrainMeter = field(default_factory=DrainMeter)

    def busy(self) -> int:
        return sum(self.running.values())

    def waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())


def trace(
    rate: float, seconds: float, seed: int, classes: tuple[str, ...], mix: tuple[float, ...]
) -> list[Request]:
    """Poisson arrivals at `rate` a second in all, split between the classes' tenants by `mix`."""
    rng = random.Random(seed)
    out: list[Request] = []
    total = sum(mix)
    for index, klass in enumerate(classes):
        t = 0.0
        while True:
            t += rng.expovariate(rate * mix[index] / total)
            if t >= seconds:
                break
            cold = rng.random() < COLD_SHARE
            out.append(Request(t, klass, index, rng.expovariate(1 / SERVICE_S), cold))
    out.sort(key=lambda r: r.at)
    return out


def simulate(
    requests: list[Request], classes_on: bool, headroom: int = 0
) -> dict[str, dict[str, float]]:
    engines = [Engine() for _ in range(ENGINES)]
    events: list[tuple[float, int, str, int, Request]] = []
    seq = 0
    for r in requests:
        r.ready = r.at + (LOAD_S if r.cold else 0.0)  # cold: its load first, holding no slot
        heapq.heappush(events, (r.ready, seq, "arrive", -1, r))
        seq += 1
    waits: dict[str, list[float]] = defaultdict(list)
    stats: dict[str, dict[str, float]] = {
        c: {"served": 0, "shed": 0, "errors": 0, "good_tokens": 0, "tokens": 0} for c in CLASSES
    }

    def key(r: Request) -> str:
        return r.klass if classes_on else str(r.tenant)

    def start(engine_i: int, r: Request, now: float) -> None:
        nonlocal seq
        engine = engines[engine_i]
        engine.running[r.klass] += 1
        wait = now - r.at
        if wait > BUDGET_S:
            stats[r.klass]["errors"] += 1
            engine.running[r.klass] -= 1
            return
        if classes_on:
            engine.turns.served(r.klass, 1, PLANS)
        waits[r.klass].append(wait + PREFILL_S)
        stats[r.klass]["served"] += 1
        stats[r.klass]["tokens"] += TOKENS
        if wait - (r.ready - r.at) <= PLANS[r.klass].max_wait_s:
            stats[r.klass]["good_tokens"] += TOKENS
        heapq.heappush(events, (now + r.service_s, seq, "done", engine_i, r))
        seq += 1

    def eligible(engine: Engine, klass: str) -> bool:
        """A free slot of the engine may go to `klass` (gateway.class_policy.may_take: a
        sheddable class leaves the gold headroom free)."""
        running = {c: n for c, n in engine.running.items() if n > 0}
        return engine.busy() < SLOTS and may_take(
            SLOTS, running, klass, 1, PLANS, engine.busy(), headroom
        )

    def admit_waiters(engine_i: int, now: float) -> None:
        engine = engines[engine_i]
        while engine.busy() < SLOTS and engine.waiting():
            waiting = [k for k, q in engine.queues.items() if q]
            if classes_on:
                waiting = [k for k in waiting if eligible(engine, k)]
                if not waiting:
                    return
                chosen = engine.turns.pick(waiting, PLANS) or waiting[0]
            else:
                while not engine.queues.get(engine.rr[0]):
                    engine.rr.rotate(-1)
                chosen = engine.rr[0]
                engine.rr.rotate(-1)
            r = engine.queues[chosen].popleft()
            if classes_on and should_shed(
                PLANS[r.klass],
                None,
                now - r.ready,
                lower_class_holds(r.klass, engine.running, PLANS),
            ):
                stats[r.klass]["shed"] += 1  # shed at its bound while it waited (gateway.limits)
                continue
            start(engine_i, r, now)

    while events:
        now, _, kind, engine_i, r = heapq.heappop(events)
        if kind == "done":
            engine = engines[engine_i]
            engine.running[r.klass] -= 1
            engine.drained += 1
            engine.meter.observe(engine.drained, now)
            admit_waiters(engine_i, now)
            continue
        # Engine choice: the least loaded; with classes, first an engine its class may take now
        # (a request held for its class's share counts nowhere, gateway.limits).
        engine_i = min(
            range(ENGINES),
            key=lambda i: (
                classes_on and not eligible(engines[i], r.klass),
                engines[i].busy() + engines[i].waiting(),
            ),
        )
        engine = engines[engine_i]
        if classes_on and eligible(engine, r.klass) and not engine.queues.get(r.klass):
            start(engine_i, r, now)
            continue
        if not classes_on and engine.busy() < SLOTS and not engine.waiting():
            start(engine_i, r, now)
            continue
        if classes_on:
            load = {c: engine.running[c] + len(engine.queues.get(c, ())) for c in CLASSES}
            wait = expected_wait_s(SLOTS, load, r.klass, 1, PLANS, engine.meter.rate, headroom)
            lower = lower_class_holds(r.klass, dict(engine.running), PLANS)
            if should_shed(PLANS[r.klass], wait, 0.0, lower):
                stats[r.klass]["shed"] += 1
                continue
        k = key(r)
        if k not in engine.queues:
            engine.queues[k] = deque()
            engine.rr.append(k)
        if classes_on and not engine.queues[k]:
            engine.turns.join(k)
        engine.queues[k].append(r)
    for c in CLASSES:
        ordered = sorted(waits[c])
        stats[c]["ttft_p99_s"] = ordered[int(0.99 * (len(ordered) - 1))] if ordered else 0.0
        stats[c]["ttft_p50_s"] = ordered[len(ordered) // 2] if ordered else 0.0
    return stats


def run(seconds: float, seed: int, mix: tuple[float, ...], headroom: int) -> dict[str, object]:
    out: dict[str, object] = {}
    # Gold's own part of the 1.0x trace, with no other tenant.
    gold_rate = CAPACITY_RPS * mix[0] / sum(mix)
    alone = simulate(
        trace(gold_rate, seconds, seed, ("gold",), (1.0,)), classes_on=True, headroom=headroom
    )
    out["gold_alone_1.0x"] = alone["gold"]
    for factor in (1.0, 1.5, 2.0):
        for on in (False, True):
            reqs = trace(CAPACITY_RPS * factor, seconds, seed, CLASSES, mix)
            out[f"{factor}x {'on' if on else 'off'}"] = simulate(reqs, on, headroom)
    return out


def table(result: dict[str, object], mix: tuple[float, ...]) -> list[str]:
    alone_p99 = result["gold_alone_1.0x"]["ttft_p99_s"]  # type: ignore[index]
    rows = []
    for name, stats in result.items():
        if name == "gold_alone_1.0x":
            continue
        s: dict[str, dict[str, float]] = stats  # type: ignore[assignment]
        served = sum(s[c]["tokens"] for c in CLASSES) or 1
        good = sum(s[c]["good_tokens"] for c in CLASSES)
        rows.append(
            f"| {name} | {s['gold']['ttft_p99_s']:.2f} s "
            f"({s['gold']['ttft_p99_s'] / alone_p99:.1f}x) "
            f"| {int(s['gold']['shed'])} / {int(s['gold']['errors'])} "
            f"| {s['bronze']['tokens'] / served:.1%} "
            f"| {int(s['silver']['shed'])} / {int(s['bronze']['shed'])} "
            f"| {int(sum(s[c]['errors'] for c in CLASSES))} | {good:,.0f} |"
        )
    gold_part = mix[0] / sum(mix)
    on: dict[str, dict[str, float]] = result["2.0x on"]  # type: ignore[assignment]
    off: dict[str, dict[str, float]] = result["2.0x off"]  # type: ignore[assignment]
    served_on = sum(on[c]["tokens"] for c in CLASSES) or 1
    good_on = sum(on[c]["good_tokens"] for c in CLASSES)
    good_off = sum(off[c]["good_tokens"] for c in CLASSES) or 1
    verdicts = [
        (
            "gold TTFT p99 at 2.0x within 1.25x of alone",
            on["gold"]["ttft_p99_s"] <= 1.25 * alone_p99,
        ),
        ("gold 0 shed, 0 errors at 2.0x", on["gold"]["shed"] + on["gold"]["errors"] == 0),
        (
            "bronze at least 10% of served tokens at 2.0x",
            on["bronze"]["tokens"] / served_on >= 0.10,
        ),
        ("goodput at 2.0x at least 0.95x of classes off", good_on >= 0.95 * good_off),
    ]
    goals = "; ".join(f"{what}: {'met' if ok else 'NOT met'}" for what, ok in verdicts)
    return [
        f"Goals (issue 46) at this mix: {goals}.",
        "",
        f"Offered load split gold : silver : bronze = {':'.join(f'{m:g}' for m in mix)}; gold alone "
        f"(its {gold_part:.0%} of the 1.0x trace, no other tenant): TTFT p99 "
        f"{alone_p99 * 1000:.0f} ms.",
        "",
        "| load, classes | gold TTFT p99 (x alone) | gold shed / errors | bronze share of "
        "served tokens | silver / bronze shed | timeouts | goodput (tokens within bound) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def render(
    results: list[tuple[tuple[float, ...], dict[str, object]]], command: str, headroom: int
) -> str:
    return "\n".join(
        [
            "<!-- bench-classes:begin -->",
            "## Service classes on saturated engines (simulated with the gateway's policy)",
            "",
            f"`{command}`: bench/classes.py replays one seeded trace of three tenants (gold, "
            "silver, bronze; offered load split by the mix below, 10% cold requests) on two engines of 8 slots "
            "(1 s mean service, so 16 requests/s), classes off (round-robin between tenants, no "
            "shedding) and on (gateway.class_policy: weighted fair queueing over classes, shed "
            f"past the class's bound, {headroom} slots of each engine kept for gold: "
            "GATEWAY_CLASS_HEADROOM), through the same policy code the gateway runs. Simulated: "
            "no engine, no gateway process; it measures the policy, not the software's overhead.",
            "",
            *[line for mix, result in results for line in table(result, mix)],
            "Bronze's weight share is 10% (1 of 6+3+1).",
            "<!-- bench-classes:end -->",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=600.0, help="simulated seconds per run")
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument(
        "--mix",
        action="append",
        help="offered load gold,silver,bronze (repeatable; default 1,1,1 and 2,3,5)",
    )
    parser.add_argument(
        "--headroom", type=int, default=2, help="slots per engine kept for gold (classes on)"
    )
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    mixes = [tuple(float(x) for x in m.split(",")) for m in args.mix or ["1,1,1", "2,3,5"]]
    results = [(mix, run(args.seconds, args.seed, mix, args.headroom)) for mix in mixes]
    print(json.dumps([r for _, r in results], indent=1))
    command = (
        f"python -m bench.classes --seconds {args.seconds:g} --seed {args.seed} "
        f"--headroom {args.headroom}"
    )
    section = render(results, command, args.headroom)
    print(section)
    if args.write_docs:
        write_section("bench-classes", section)


if __name__ == "__main__":
    main()
