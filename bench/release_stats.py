"""The release guard's test on simulated plans: how often an equal candidate is rolled back (the
false-rollback rate, beside the stated alpha), how many samples a bad one takes to be rolled
back, and how many an equal one needs to advance. It runs the controller's own statistics
(evals.scoring.release_stats), looking after every `--look` samples a side as the beat does;
answers are Bernoulli draws at the stated pass rates, not engine replies.

    python -m bench.release_stats --plans 1000 --write-docs
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

from bench.docs_section import write_section
from evals.scoring.release_stats import Counts, Decision, GuardTest, judge

SECTION = "release-stats"
# (name, the candidate's pass rate, the stable's)
CASES = (
    ("equal, both 99 %", 0.99, 0.99),
    ("equal, both 90 %", 0.90, 0.90),
    ("2 points worse (inside the margin)", 0.88, 0.90),
    ("10 points worse", 0.80, 0.90),
    ("fails every live check", 0.00, 1.00),
)


@dataclass
class Outcome:
    decision: Decision
    samples: int  # per side, when it was decided (or the cap)


def one_plan(
    rng: random.Random, p_c: float, p_s: float, test: GuardTest, look: int, cap: int
) -> Outcome:
    c = s = n = 0
    while n < cap:
        n += look
        c += sum(rng.random() < p_c for _ in range(look))
        s += sum(rng.random() < p_s for _ in range(look))
        decision = judge(Counts(n, c), Counts(n, s), test).decision
        if decision != Decision.HOLD:
            return Outcome(decision, n)
    return Outcome(Decision.HOLD, n)


def run(plans: int, look: int, cap: int, seed: int, test: GuardTest) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows = []
    for name, p_c, p_s in CASES:
        out = [one_plan(rng, p_c, p_s, test, look, cap) for _ in range(plans)]
        rolled = [o.samples for o in out if o.decision == Decision.ROLLBACK]
        advanced = [o.samples for o in out if o.decision == Decision.ADVANCE]
        rows.append(
            {
                "case": name,
                "rollback": len(rolled),
                "advance": len(advanced),
                "hold": plans - len(rolled) - len(advanced),
                "rollback_median_n": statistics.median(rolled) if rolled else None,
                "advance_median_n": statistics.median(advanced) if advanced else None,
            }
        )
    return rows


def render(rows: list[dict[str, object]], args: argparse.Namespace, seconds: float) -> str:
    lines = [
        f"<!-- {SECTION}:begin -->",
        "## Release guards: the test on simulated plans",
        "",
        f"`python -m bench.release_stats --plans {args.plans} --look {args.look} --cap {args.cap} "
        f"--seed {args.seed}` ({seconds:.1f} s). Each plan is one step watched after every "
        f"{args.look} sampled answers a side, up to {args.cap}, with alpha {args.alpha} and "
        f"margin {args.margin} and a minimum sample of {args.min_samples} (the controller's own "
        "code, evals/scoring/release_stats.py); answers are random draws at the stated pass "
        "rates, not engine replies. The stated false-rollback rate is alpha, at any number of "
        "looks.",
        "",
        "| candidate vs stable | plans | rolled back | advanced | still holding | "
        "median samples a side to roll back | median samples a side to advance |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {args.plans} | {r['rollback']} | {r['advance']} | {r['hold']} | "
            f"{r['rollback_median_n'] or '-'} | {r['advance_median_n'] or '-'} |"
        )
    lines.append(f"<!-- {SECTION}:end -->")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plans", type=int, default=1000)
    parser.add_argument("--look", type=int, default=10)
    parser.add_argument("--cap", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--min-samples", type=int, default=50)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    test = GuardTest(alpha=args.alpha, margin=args.margin, min_samples=args.min_samples)
    started = time.perf_counter()
    rows = run(args.plans, args.look, args.cap, args.seed, test)
    section = render(rows, args, time.perf_counter() - started)
    print(section)
    if args.write_docs:
        write_section(SECTION, section)


if __name__ == "__main__":
    main()
