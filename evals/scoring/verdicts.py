"""A run's summary from its cases' verdicts, and the gate's verdict on it against a policy.

A case passes when every scorer in its `expect` passes; cases without scorers count in neither
pass rate. The regression is in points: (serving now's pass rate - the candidate's) x 100.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evals.scoring.pairwise import Outcome, passing_share

CANDIDATE = "candidate"
BASELINE = "baseline"
SIDES = (CANDIDATE, BASELINE)


@dataclass(frozen=True)
class CaseOutcome:
    """One case, both sides: each scorer's pass or fail (None: that side gave no answer)."""

    id: str
    must_pass: bool
    candidate: dict[str, bool] | None
    baseline: dict[str, bool] | None
    pairwise: str | None = None  # "win" | "tie" | "loss"

    def passed(self, side: str) -> bool | None:
        verdicts = self.candidate if side == CANDIDATE else self.baseline
        if verdicts is None:
            return False  # no answer (an error) fails the case
        return all(verdicts.values()) if verdicts else None


@dataclass(frozen=True)
class Policy:
    min_pass_rate: float | None = None  # 0..1
    max_regression_points: float | None = None
    min_pairwise_win_or_tie: float | None = None  # 0..1
    # Whether a real tie (TIE in both orders) passes the pairwise criterion; splits, losses and
    # unreadable judgements never do.
    pairwise_ties_pass: bool = False
    must_pass: bool = True  # every must_pass case passes on the candidate

    @classmethod
    def from_mapping(cls, terms: Mapping[str, Any]) -> Policy:
        """From a policy's fields (a row, or the snapshot a run keeps)."""
        return cls(
            min_pass_rate=terms.get("min_pass_rate"),
            max_regression_points=terms.get("max_regression_points"),
            min_pairwise_win_or_tie=terms.get("min_pairwise_win_or_tie"),
            # A snapshot kept before the term existed read ties as passing.
            pairwise_ties_pass=bool(terms.get("pairwise_ties_pass", False)),
        )


@dataclass
class Summary:
    cases: int = 0
    scored: int = 0
    passed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SIDES, 0))
    per_scorer: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    must_pass_failed: list[str] = field(default_factory=list)
    regressed: list[str] = field(default_factory=list)
    pairwise: dict[str, int] = field(default_factory=dict)

    def pass_rate(self, side: str) -> float | None:
        return self.passed[side] / self.scored if self.scored else None

    @property
    def regression_points(self) -> float | None:
        cand, base = self.pass_rate(CANDIDATE), self.pass_rate(BASELINE)
        return None if cand is None or base is None else round((base - cand) * 100, 2)

    def pairwise_passing(self, *, ties_pass: bool) -> float | None:
        """The share of judged cases that pass the pairwise criterion (evals.scoring.pairwise)."""
        return passing_share(self.pairwise, ties_pass=ties_pass)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "scored": self.scored,
            "passed": dict(self.passed),
            "pass_rate": {side: self.pass_rate(side) for side in SIDES},
            "regression_points": self.regression_points,
            "per_scorer": self.per_scorer,
            "must_pass_failed": self.must_pass_failed,
            "regressed": self.regressed,
            # Every outcome, zeros included, once anything was judged: a split (position bias)
            # and an unreadable reply are counted apart from a real tie.
            "pairwise": (
                {o.value: self.pairwise.get(o.value, 0) for o in Outcome} if self.pairwise else {}
            ),
            "pairwise_win": self.pairwise_passing(ties_pass=False),
            "pairwise_win_or_tie": self.pairwise_passing(ties_pass=True),
        }


def summarize(outcomes: Iterable[CaseOutcome]) -> Summary:
    summary = Summary()
    for case in outcomes:
        summary.cases += 1
        results = {side: case.passed(side) for side in SIDES}
        if results[CANDIDATE] is not None:
            summary.scored += 1
            for side in SIDES:
                summary.passed[side] += bool(results[side])
        for side, verdicts in ((CANDIDATE, case.candidate), (BASELINE, case.baseline)):
            for scorer, ok in (verdicts or {}).items():
                counts = summary.per_scorer.setdefault(scorer, {s: [0, 0] for s in SIDES})
                counts[side][0] += ok
                counts[side][1] += 1
        if case.must_pass and not results[CANDIDATE]:
            summary.must_pass_failed.append(case.id)
        if results[BASELINE] and results[CANDIDATE] is False:
            summary.regressed.append(case.id)
        if case.pairwise:
            summary.pairwise[case.pairwise] = summary.pairwise.get(case.pairwise, 0) + 1
    return summary


def gate(summary: Summary, policy: Policy) -> dict[str, Any]:
    """{passed, criteria: [{name, required, actual, passed, message}]}: each criterion the policy
    sets, and whether the run meets it."""
    criteria: list[dict[str, Any]] = []

    def add(name: str, required: Any, actual: Any, passed: bool, message: str) -> None:
        criteria.append(
            {
                "name": name,
                "required": required,
                "actual": actual,
                "passed": passed,
                "message": message,
            }
        )

    if policy.must_pass:
        failed = summary.must_pass_failed
        add(
            "must_pass",
            0,
            len(failed),
            not failed,
            f"must-pass cases failed: {', '.join(failed[:10])}"
            if failed
            else "every must-pass case passes",
        )
    rate = summary.pass_rate(CANDIDATE)
    if policy.min_pass_rate is not None:
        ok = rate is not None and rate >= policy.min_pass_rate
        add(
            "min_pass_rate",
            policy.min_pass_rate,
            rate,
            ok,
            f"pass rate {_pct(rate)} against at least {_pct(policy.min_pass_rate)}",
        )
    if policy.max_regression_points is not None:
        points = summary.regression_points
        ok = points is not None and points <= policy.max_regression_points
        add(
            "max_regression_points",
            policy.max_regression_points,
            points,
            ok,
            f"regression {points} points against at most {policy.max_regression_points}",
        )
    if policy.min_pairwise_win_or_tie is not None:
        share = summary.pairwise_passing(ties_pass=policy.pairwise_ties_pass)
        ok = share is not None and share >= policy.min_pairwise_win_or_tie
        counted = "win or tie" if policy.pairwise_ties_pass else "win (ties do not pass)"
        counts = summary.pairwise
        add(
            "min_pairwise_win_or_tie",
            policy.min_pairwise_win_or_tie,
            share,
            ok,
            f"pairwise {counted} {_pct(share)} against at least "
            f"{_pct(policy.min_pairwise_win_or_tie)} (splits {counts.get('split', 0)}, "
            f"unreadable {counts.get('unreadable', 0)})",
        )
    return {"passed": all(c["passed"] for c in criteria), "criteria": criteria}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"
