"""`make bench-cache2`: run the second goal set's suite and write its section of docs/benchmarks.md.

    python -m bench.cachesim.round2_report [--requests N] [--seeds 1,2,3] [--only 2,4]
        [--render-only]

`--only` re-runs those goals ("1+3", "2", "4", "5", "6") and keeps the others' saved results
(var/cachesim/round2.json), so one goal can be re-measured without the rest.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.cachesim.round2 import SEEDS, run_round2
from bench.cachesim.round2_goals import goal1, goal2, goal3, goal4, goal5, goal6
from bench.docs_section import markers, write_section

SECTION = "cachesim-round2"
RESULTS = Path("var/cachesim/round2.json")

GOALS = (
    ("1. Against `a0` (sequential, `portal-noslo`)", goal1),
    ("2. Fairness that costs nobody (under load, `portal`)", goal2),
    ("3. The GPU tier (sequential)", goal3),
    ("4. Traffic with structure (under load, engine nodes pre-staged)", goal4),
    ("5. Across engines (four engines, one pool, `portal` on every engine)", goal5),
    ("6. Overload", goal6),
)


BOUNDS = [
    "### How a goal is shown unreachable",
    "",
    "- **Online bound (goals 1 and 4).** When requests are independent draws from a fixed "
    "popularity p, the next request is independent of everything a policy has seen, so "
    "whatever C versions it holds, that request hits with probability at most the sum of the C "
    "largest p. Every online policy therefore expects at least n x (1 - top_C(p)) cold loads "
    "(`bench/cachesim/references.py`, `online_miss_bound`; ± one standard deviation). `a0` "
    "reads the trace's realised counts, which carry information about the future, and can go "
    "below it. Where 1.03x `a0` (goal 1) or 0.8x the better of `lru` and `a0` (goal 4) lies "
    "under the bound, no online policy reaches it in expectation; a run gets there only by "
    "luck, with the chance per seed shown as P (normal approximation).",
    "- **Conservation (goal 2, uniform popularity).** With every version equally likely, "
    "every online policy's expected hits are C / N per request whatever it keeps, so cold "
    "loads only move between classes: cutting gold's by 25% with no other class above +5% "
    "needs the other classes' cold loads to be at least 5x gold's (0.25 x gold <= 0.05 x "
    "others). With gold a third of the adapters they are 2x.",
    "- **Cold floor (goal 5).** A request whose version is in no engine's cache waits for a "
    "load on whichever engine it is sent to, and with independent draws that happens with "
    "probability at least the online bound over all the fleet's cache slots, whatever the "
    "request's prompt. Such a request takes at least the load from the node disk, the copy "
    "into a GPU slot and its own prefill. So the expected number of requests at or above x ms "
    "is at least miss x (requests whose load and prefill alone reach x ms), and p99 is at "
    "least the largest x where that reaches the 1% of requests that nearest-rank p99 looks at "
    "(no fetch from the object store, no queueing behind other loads: a floor, not an "
    "estimate). P is the chance per seed that a run still comes out below the goal.",
    "- **The pin reference (goal 3).** `pin-oracle` pins the versions most requested over the "
    "whole trace, as many as the hard rules allow (one GPU slot and one cache slot unpinned, "
    "tenant pin quotas), and evicts as `a0`: the best pin set given the true popularity.",
]


def render(r: dict[str, Any]) -> str:
    begin, end = markers(SECTION)
    done = [(title, fn(r)) for title, fn in GOALS if _has(r, title)]
    seeds = ", ".join(map(str, r["seeds"]))
    parts = [
        begin,
        "## Adapter cache, second goal set: the online optimum, fairness, structure, fleet",
        "",
        f"Reproduce with `make bench-cache2` (this run: {r['wall_s'] / 60:.1f} min wall, "
        f"{r['cpu_s'] / 60:.1f} min CPU). Seeds "
        f"{seeds}; every number is the mean over the seeds, ratios show their per-seed range; "
        "every table has `lru`, `a0` and `belady` beside the policy, all from one run. The "
        "simulator and its policies are the ones of the section above; `lru` is still "
        "checked exact and against a real engine there.",
        "",
        "### Goals, measured",
        "",
        "| goal | measured | |",
        "|---|---|---|",
        *(f"| {title} | {summary} | {status} |" for title, (_, summary, status) in done),
        "",
    ]
    for title, (lines, _, _) in done:
        parts += [f"### {title}", "", *lines, ""]
    parts += [*BOUNDS, "", end]
    return "\n".join(parts) + "\n"


def _has(r: dict[str, Any], title: str) -> bool:
    goal = title.split(".")[0]
    goal = "1+3" if goal in ("1", "3") else goal
    return any(c["goal"] == goal and c["name"] in r["results"] for c in r["cases"])


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    names = {c["name"] for c in new["cases"]}
    return {
        "results": {
            **{k: v for k, v in old["results"].items() if k not in names},
            **new["results"],
        },
        "cases": [c for c in old["cases"] if c["name"] not in names] + new["cases"],
        "seeds": new["seeds"],
        "cpu_s": old["cpu_s"] + new["cpu_s"],
        "wall_s": old["wall_s"] + new["wall_s"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cachesim.round2_report", description=__doc__)
    ap.add_argument("--requests", type=int, default=5_000, help="per concurrent scenario")
    ap.add_argument("--workers", type=int, default=2, help="processes")
    ap.add_argument(
        "--sequential-requests", type=int, help="goals 1 and 3 (default: make bench-cache's)"
    )
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument("--only", default="", help="goals to re-run, e.g. 2,4 (1 and 3 are one run)")
    ap.add_argument("--cases", default="", help="only these scenarios, e.g. gold-third")
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--render-only", action="store_true", help="rewrite the section, no runs")
    a = ap.parse_args(argv)
    results = Path(a.results)
    if not a.render_only:
        only = tuple("1+3" if g in ("1", "3", "1+3") else g for g in a.only.split(",") if g)
        started = time.monotonic()
        seeds = tuple(int(x) for x in a.seeds.split(","))
        new = run_round2(
            seeds=seeds,
            requests=a.requests,
            sequential_requests=a.sequential_requests,
            workers=a.workers,
            only=only,
            names=tuple(x for x in a.cases.split(",") if x),
        )
        new["wall_s"] = time.monotonic() - started
        if (only or a.cases) and results.exists():
            new = _merge(json.loads(results.read_text(encoding="utf-8")), new)
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps(new, indent=1), encoding="utf-8")
    saved = json.loads(results.read_text(encoding="utf-8"))
    write_section(SECTION, render(saved), doc=Path(a.out))
    print(f"wrote the {SECTION} section of {a.out} from {results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
