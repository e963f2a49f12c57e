"""The second goal set's goals (`make bench-cache2`): each goal's tables and its verdict from the suite's results.

Numbers are means over the seeds; a ratio's per-seed range is shown beside it. A verdict uses the
means, scenario by scenario: met, not met, or unreachable where a bound shows no policy can.
"""

from __future__ import annotations

import math
from typing import Any

from bench.cachesim.references import cold_percentile_chance, cold_percentile_floor


def mean(r: dict[str, Any], case: str, policy: str, key: str, slo: str | None = None) -> float:
    runs = r["results"][case][policy].values()
    vals = [(m["by_slo"].get(slo, {}) if slo else m).get(key, 0) for m in runs]
    return sum(vals) / max(1, len(vals))


def ratio_range(r: dict[str, Any], case: str, a: str, b: str, key: str) -> tuple[float, float]:
    ra, rb = r["results"][case][a], r["results"][case][b]
    vals = [ra[s][key] / max(1, rb[s][key]) for s in ra if s in rb]
    return min(vals), max(vals)


def _mark(ok: bool | None) -> str:
    return "met" if ok else ("**unreachable**" if ok is None else "**not met**")


def _cases(r: dict[str, Any], goal: str) -> list[dict[str, Any]]:
    return [c for c in r["cases"] if c["goal"] == goal and c["name"] in r["results"]]


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|---" * len(head) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


# --- goals 1 and 3 (sequential, exact counts) ---


def goal1(r: dict[str, Any]) -> tuple[list[str], str, str]:
    pols = ["lru", "a0", "belady", "portal-noslo", "portal", "pin-oracle"]
    rows, verdicts = [], []
    for c in _cases(r, "1+3"):
        s = c["name"]
        a0 = mean(r, s, "a0", "cold_loads")
        noslo = mean(r, s, "portal-noslo", "cold_loads")
        lo, hi = ratio_range(r, s, "portal-noslo", "a0", "cold_loads")
        target = 1.0 if c["bound"] is None else 1.03
        bound = c["bound"]
        ok: bool | None = noslo / a0 <= target
        note = ""
        if bound is not None:
            b, sd = bound
            note = f"{b:.0f} ± {sd:.0f}"
            if not ok and b > target * a0:
                # Beneath what any online policy can expect: reached only by luck, with the
                # chance below per seed (normal approximation).
                ok = None
                luck = 0.5 * math.erfc((b - target * a0) / sd / math.sqrt(2))
                note += f" (P {100 * luck:.0f}%)"
        verdicts.append((s, ok, noslo / a0))
        rows.append(
            [s]
            + [f"{mean(r, s, p, 'cold_loads'):.0f}" for p in pols]
            + [note or "-", f"{noslo / a0:.3f} ({lo:.3f}-{hi:.3f})", _mark(ok)]
        )
    lines = _table(["scenario", *pols, "online bound", "noslo / a0 (seeds)", "goal 1"], rows)
    if "mixed-ranks-2x" in r["results"]:
        gb = ", ".join(
            f"{p} {mean(r, 'mixed-ranks-2x', p, 'bytes_loaded') / 1e9:.0f}"
            for p in ("lru", "a0", "belady", "portal-noslo", "portal")
        )
        lines += [
            "",
            "mixed-ranks-2x counts adapters, but the policy weighs reload cost (weight 0.5): "
            f"it loads fewer bytes than `a0` while loading more adapters. GB loaded: {gb}.",
        ]
    met = sum(1 for _, ok, _ in verdicts if ok)
    unreachable = [s for s, ok, _ in verdicts if ok is None]
    missed = [f"{s} {x:.3f}" for s, ok, x in verdicts if ok is False]
    summary = (
        f"met on {met} of {len(verdicts)} scenarios"
        + (
            f"; beneath the online bound (unreachable in expectation) on {', '.join(unreachable)}"
            if unreachable
            else ""
        )
        + (f"; not met on {', '.join(missed)}" if missed else "")
    )
    status = "met" if met == len(verdicts) else ("not met" if missed else "met where reachable")
    return lines, summary, status


def goal3(r: dict[str, Any]) -> tuple[list[str], str, str]:
    pols = ["lru", "a0", "belady", "portal-noslo", "portal", "pin-oracle"]
    rows, by_belady, by_pins, oracle = [], [], [], []
    for c in _cases(r, "1+3"):
        s = c["name"]
        por = mean(r, s, "portal", "gpu_loads")
        oracle.append(mean(r, s, "pin-oracle", "gpu_loads") / mean(r, s, "belady", "gpu_loads"))
        vb = por / mean(r, s, "belady", "gpu_loads")
        vp = por / mean(r, s, "pin-oracle", "gpu_loads")
        by_belady.append(vb)
        by_pins.append(vp)
        rows.append(
            [s]
            + [f"{mean(r, s, p, 'gpu_loads'):.0f}" for p in pols]
            + [
                f"{vb:.3f}",
                f"{vp:.3f}",
                f"{mean(r, s, 'pin-oracle', 'gpu_loads') / mean(r, s, 'belady', 'gpu_loads'):.3f}",
            ]
        )
    lines = _table(
        ["scenario", *pols, "portal / belady", "portal / pin-oracle", "pin-oracle / belady"], rows
    )
    per_scenario = [b <= 1.15 or p <= 1.02 for b, p in zip(by_belady, by_pins, strict=True)]
    summary = (
        f"portal / belady {min(by_belady):.2f}x to {max(by_belady):.2f}x (goal 1.15x); "
        f"portal / pin-oracle {min(by_pins):.3f}x to {max(by_pins):.3f}x (goal 1.02x); the "
        f"best pin set itself needs {min(oracle):.2f}x to {max(oracle):.2f}x belady's"
    )
    summary += f"; met (either way) on {sum(per_scenario)} of {len(per_scenario)} scenarios"
    return lines, summary, "met" if all(per_scenario) else "not met"


# --- goal 2 (classes, concurrent) ---


def goal2(r: dict[str, Any]) -> tuple[list[str], str, str]:
    pols = ["lru", "a0", "belady", "portal-noslo", "portal"]
    lines: list[str] = []
    verdicts = []
    cases = _cases(r, "2") + [c for c in _cases(r, "6") if c["name"] == "overload-3x"]
    for c in cases:
        s = c["name"]
        classes = [k for k in ("gold", "silver", "bronze") if mean(r, s, "lru", "requests", k) > 0]
        rows = []
        for k in classes:
            rows.append(
                [k]
                + [
                    f"{mean(r, s, p, 'cold_loads', k):.0f} cold, p99 "
                    f"{mean(r, s, p, 'ttft_p99_ms', k):.0f} ms"
                    for p in pols
                ]
            )
        gold_cut = 1 - mean(r, s, "portal", "cold_loads", "gold") / max(
            1, mean(r, s, "lru", "cold_loads", "gold")
        )
        worst = max(
            (
                max(
                    mean(r, s, "portal", key, k) / max(1e-9, mean(r, s, "lru", key, k)) - 1
                    for key in ("cold_loads", "ttft_p99_ms")
                ),
                k,
            )
            for k in classes
            if k != "gold"
        )
        ok: bool | None = gold_cut >= 0.25 and worst[0] <= 0.05
        if not ok and s.startswith("flat"):
            # Uniform popularity: every online policy's expected hits are fixed (C / N per
            # request), so cold loads only move between classes; cutting gold's by 25% with
            # no other class above +5% needs the others' cold loads >= 5x gold's.
            g = mean(r, s, "lru", "cold_loads", "gold")
            others = mean(r, s, "lru", "cold_loads") - g
            if others < 5 * g:
                ok = None
        verdicts.append((s, ok, gold_cut, worst))
        lines += [
            f"{s} ({c['what']}): gold cold loads {100 * -gold_cut:+.0f}% against lru; worst "
            f"other class {worst[1]} {100 * worst[0]:+.0f}% — {_mark(ok)}",
            "",
            *_table(["class", *pols], rows),
            "",
        ]
    met = [s for s, ok, _, _ in verdicts if ok]
    unreachable = [s for s, ok, _, _ in verdicts if ok is None]
    missed = [
        f"{s} (gold {100 * -g:+.0f}%, {w[1]} {100 * w[0]:+.0f}%)"
        for s, ok, g, w in verdicts
        if ok is False
    ]
    summary = (
        f"met on {len(met)} of {len(verdicts)}"
        + (f"; unreachable (conservation bound) on {', '.join(unreachable)}" if unreachable else "")
        + (f"; not met on {'; '.join(missed)}" if missed else "")
    )
    return (
        lines,
        summary,
        "met"
        if not missed and not unreachable
        else ("not met" if missed else "met where reachable"),
    )


# --- goal 4 (structured traffic) ---


def goal4(r: dict[str, Any]) -> tuple[list[str], str, str]:
    pols = ["lru", "a0", "belady", "portal", "portal-sched"]
    rows, verdicts = [], []
    for c in _cases(r, "4"):
        s = c["name"]
        cold = {p: mean(r, s, p, "cold_requests") for p in pols}
        vs_lru = cold["portal-sched"] / cold["lru"] - 1
        vs_a0 = cold["portal-sched"] / cold["a0"] - 1
        ok: bool | None = vs_lru <= -0.20 and vs_a0 <= -0.20
        if s == "sessions":
            ok = ok and cold["portal-sched"] <= cold["lru"]
        bounds = [m["online_bound"] for m in r["results"][s]["lru"].values() if "online_bound" in m]
        note = "-"
        if bounds:
            b = sum(x[0] for x in bounds) / len(bounds)
            sd = sum(x[1] for x in bounds) / len(bounds)
            note = f"{b:.0f} ± {sd:.0f}"
            target = 0.8 * min(cold["lru"], cold["a0"])
            if not ok and b > target:
                ok = None  # 20% below both is beneath what any online policy can expect
                note += f" (P {50 * math.erfc((b - target) / sd / math.sqrt(2)):.0f}%)"
        verdicts.append((s, ok, vs_lru, vs_a0))
        rows.append(
            [s]
            + [f"{cold[p]:.0f} / {mean(r, s, p, 'cold_loads'):.0f}" for p in pols]
            + [note, f"{100 * vs_lru:+.0f}%", f"{100 * vs_a0:+.0f}%", _mark(ok)]
        )
    lines = [
        "| scenario | what |",
        "|---|---|",
        *(f"| {c['name']} | {c['what']} |" for c in _cases(r, "4")),
        "",
        "Cold requests (requests that waited for a load) / cold loads, mean over seeds. The "
        "online bound is what any online policy must expect from the independent draws inside "
        "the traffic: each session's first turn, the launch's 64 stationary adapters (even "
        "with all 32 slots theirs), and every business-hours request from the popularity of the "
        "zones open at its time (known in advance, schedules and all), times the share outside "
        "the 32 most popular. Where the goal lies above the bound it is not shown out of reach; "
        "the sessions' own analysis is in the next section.",
        "",
        *_table(["scenario", *pols, "online bound", "sched vs lru", "sched vs a0", "goal 4"], rows),
    ]
    summary = "; ".join(
        f"{s}: {100 * a:+.0f}% vs lru, {100 * b:+.0f}% vs a0" for s, _, a, b in verdicts
    )
    return lines, *_verdict(summary, verdicts, "online bound")


def _verdict(
    summary: str, verdicts: list[tuple[str, bool | None, float, float]], bound: str
) -> tuple[str, str]:
    """(summary, status) of a goal whose scenarios are met (True), not (False) or shown
    unreachable by `bound` (None)."""
    missed = [s for s, ok, _, _ in verdicts if ok is False]
    unreachable = [s for s, ok, _, _ in verdicts if ok is None]
    if unreachable:
        summary += f"; unreachable ({bound}) on {', '.join(unreachable)}"
    return summary, "not met" if missed else ("met where reachable" if unreachable else "met")


# --- goal 5 (fleet) and goal 6 (overload) ---


def goal5(r: dict[str, Any]) -> tuple[list[str], str, str]:
    labels = [
        ("portal@round-robin", "round-robin"),
        ("portal@residency-first", "residency-first"),
        ("portal", "choose_engine"),
        ("lru", "lru + choose_engine"),
        ("a0", "a0 + choose_engine"),
        ("belady", "belady + choose_engine"),
    ]
    rows, verdicts = [], []
    floors: list[tuple[str, dict[str, float], tuple[float, float]]] = []
    for c in _cases(r, "5"):
        s = c["name"]
        p99 = {p: mean(r, s, p, "ttft_p99_ms") for p, _ in labels}
        cold = {p: mean(r, s, p, "cold_loads") for p, _ in labels}
        vs_rr = p99["portal"] / p99["portal@round-robin"] - 1
        vs_rf = p99["portal"] / p99["portal@residency-first"] - 1
        fewer = cold["portal"] < min(cold["portal@round-robin"], cold["portal@residency-first"])
        ok: bool | None = vs_rr <= -0.30 and vs_rf <= -0.15 and fewer
        floor = _cold_floor(r, s, 0.70 * p99["portal@round-robin"])
        if floor is not None:
            floors.append((s, p99, floor))
            if not ok and floor[0] > 0.70 * p99["portal@round-robin"]:
                ok = None  # beneath what any engine choice can expect (the cold floor)
        verdicts.append((s, ok, vs_rr, vs_rf))
        for p, name in labels:
            per_engine = r["results"][s][p][str(r["seeds"][0])]["adapters_per_engine"]
            rows.append(
                [
                    s,
                    name,
                    f"{cold[p]:.0f}",
                    f"{mean(r, s, p, 'ttft_p50_ms'):.0f}",
                    f"{p99[p]:.0f}",
                    ", ".join(map(str, per_engine)),
                ]
            )
    lines = [
        *(f"- {c['name']}: {c['what']}" for c in _cases(r, "5")),
        "",
        *_table(
            [
                "scenario",
                "engine choice",
                "cold loads",
                "TTFT p50 ms",
                "TTFT p99 ms",
                f"adapters per engine (seed {r['seeds'][0]})",
            ],
            rows,
        ),
    ]
    for s, p99, (floor_ms, chance) in floors:
        miss = [m["cold_floor"]["miss"] for m in r["results"][s]["lru"].values()][0]
        rr, rf = p99["portal@round-robin"], p99["portal@residency-first"]
        mark = "**unreachable**" if floor_ms > 0.70 * rr else "not shown unreachable"
        lines += [
            "",
            f"{s}: more adapters than the fleet's cache slots, so any online policy expects at "
            f"least {100 * miss:.1f}% of the requests cold whatever the engine choice (online "
            "bound over all engines' slots), each with its own prompt. The cold floor is the p99 "
            "those cold requests alone set: load from the node disk, copy into a GPU slot and "
            "prefill, with no fetch from the object store and no queueing (`cold_percentile_floor`"
            " in `bench/cachesim/references.py`).",
            "",
            *_table(
                [
                    "scenario",
                    "round-robin p99",
                    "residency-first p99",
                    "choose_engine p99",
                    "belady + choose_engine p99",
                    "cold floor p99 (any engine choice)",
                    "goal: 0.70 x round-robin",
                    "goal: 0.85 x residency-first",
                    "goal 5",
                ],
                [
                    [
                        s,
                        f"{rr:.0f}",
                        f"{rf:.0f}",
                        f"{p99['portal']:.0f}",
                        f"{p99['belady']:.0f}",
                        f"{floor_ms:.0f} ms (P {100 * chance:.0f}%)",
                        f"{0.70 * rr:.0f}",
                        f"{0.85 * rf:.0f}",
                        mark,
                    ]
                ],
            ),
        ]
    summary = "; ".join(
        f"{s}: p99 {100 * a:+.0f}% vs round-robin, {100 * b:+.0f}% vs residency-first"
        for s, _, a, b in verdicts
    )
    return lines, *_verdict(summary, verdicts, "cold floor")


def _cold_floor(r: dict[str, Any], case: str, target_ms: float) -> tuple[float, float] | None:
    """(the p99 cold floor in ms, the chance a run beats `target_ms`), means over the seeds."""
    runs = [m["cold_floor"] for m in r["results"][case]["lru"].values() if "cold_floor" in m]
    if not runs or runs[0]["miss"] <= 0.0:
        return None
    floors = [cold_percentile_floor(f["at_least_ms"], f["miss"], f["requests"])[0] for f in runs]
    chances = [
        cold_percentile_chance(f["at_least_ms"], f["miss"], f["requests"], target_ms) for f in runs
    ]
    return sum(floors) / len(floors), sum(chances) / len(chances)


def goal6(r: dict[str, Any]) -> tuple[list[str], str, str]:
    pols = ["lru", "a0", "belady", "portal-noslo", "portal"]
    rows, verdicts = [], []
    for c in _cases(r, "6"):
        s = c["name"]
        p99 = {p: mean(r, s, p, "ttft_p99_ms") for p in pols if p in r["results"][s]}
        lo, hi = ratio_range(r, s, "portal", "lru", "ttft_p99_ms")
        ok = p99["portal"] <= p99["lru"]
        verdicts.append((s, ok, p99["portal"] / p99["lru"] - 1))
        rows.append(
            [s, c["what"]]
            + [f"{p99[p]:.0f}" if p in p99 else "-" for p in pols]
            + [f"{lo:.3f}-{hi:.3f}", _mark(ok)]
        )
    lines = _table(["scenario", "traffic", *pols, "portal / lru (seeds)", "goal 6"], rows)
    summary = "; ".join(f"{s}: p99 {100 * x:+.1f}% vs lru" for s, _, x in verdicts)
    return lines, summary, "met" if all(ok for _, ok, _ in verdicts) else "not met"
