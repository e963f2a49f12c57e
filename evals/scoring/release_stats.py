"""A release guard's verdict as a test: the candidate's pass rate against the stable's, judged with
an always-valid confidence sequence, so the controller may look after every sample and still keep
its stated error rates (pure Python: the controller and `bench/` run this same code).

The test is the normal-mixture sequential probability ratio test (mSPRT; Robbins 1970, Johari et
al. 2017, "Peeking at A/B tests") on the difference of two pass rates, theta = p_candidate -
p_stable, with the estimate's variance V = p_c(1-p_c)/n_c + p_s(1-p_s)/n_s (each rate taken as
(passed + 0.5) / (n + 1), so a side with every answer passing still has a variance) and a normal
mixture of variance tau^2 over the alternatives. Its confidence sequence at level alpha,

    theta_hat +- sqrt( V (V + tau^2) / tau^2 * (2 ln(1/alpha) + ln((V + tau^2) / V)) ),

covers the true difference at every look at once with probability at least 1 - alpha (the
normal approximation: each side needs MIN_SIDE_SAMPLES before anything is decided). Hence:

- **rollback** when the whole interval lies below 0 (the candidate answers worse than the
  stable). For a candidate at least as good as the stable, the chance that this ever happens,
  however often the controller looks, is at most alpha: the stated false-rollback rate.
- **advance** when the step's minimum sample is reached and the whole interval lies above
  -margin (non-inferiority: the candidate is at most `margin` worse). For a candidate worse by
  more than the margin, the chance of advancing is at most alpha too.
- **hold** otherwise: too few samples, or not yet enough evidence either way.

Shadow pairs (`judge_pairs`) are one sample, not two: each pair is scored for the candidate
+1 (the judge prefers it in both orders), -1 (prefers the stable in both, or the judgement is
unreadable) or 0 (a tie in both orders, or a split), and the same confidence sequence is taken on
the mean score d = P(win) - P(loss or unreadable), with the variance of one score, s^2 =
p_win + p_loss - (p_win - p_loss)^2 (rates smoothed as above), over n. The same three rules
follow: rollback when the interval lies below 0 (for a candidate the judge finds at least as good
as the stable, at most alpha however often it is looked at), advance when it lies above -margin
with the step's sample, else hold.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

# Below this many sampled answers on a side the normal approximation is not trusted: hold.
MIN_SIDE_SAMPLES = 10
DEFAULT_ALPHA = 0.05
DEFAULT_MARGIN = 0.05


class Decision(StrEnum):
    ADVANCE = "advance"
    HOLD = "hold"
    ROLLBACK = "rollback"


@dataclass(frozen=True, slots=True)
class Counts:
    """One side's sampled answers: how many, and how many passed."""

    n: int = 0
    passed: int = 0

    def __post_init__(self) -> None:
        if self.n < 0 or not 0 <= self.passed <= self.n:
            raise ValueError(f"passed ({self.passed}) must lie within 0..n ({self.n})")

    @property
    def rate(self) -> float | None:
        return self.passed / self.n if self.n else None

    def smoothed(self) -> float:
        return (self.passed + 0.5) / (self.n + 1)


@dataclass(frozen=True, slots=True)
class GuardTest:
    """What a guard's test asks: its error rate, its non-inferiority margin, the mixture's scale
    (tau; by default the margin: the test is most sensitive to differences of that size), and
    the sample each side needs before an advance."""

    alpha: float = DEFAULT_ALPHA
    margin: float = DEFAULT_MARGIN
    tau: float | None = None
    min_samples: int = MIN_SIDE_SAMPLES

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError("alpha must lie strictly between 0 and 1")
        if not 0 <= self.margin < 1:
            raise ValueError("margin must lie within [0, 1)")
        if self.tau is not None and self.tau <= 0:
            raise ValueError("tau must be positive")
        if self.min_samples < 0:
            raise ValueError("min_samples must be at least 0")

    @property
    def mixture_scale(self) -> float:
        return self.tau if self.tau is not None else max(self.margin, 0.01)


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    decision: Decision
    reason: str
    estimate: float | None  # p_candidate - p_stable
    low: float | None  # the always-valid interval of that difference
    high: float | None
    candidate: Counts
    stable: Counts
    alpha: float
    margin: float

    def as_dict(self) -> dict[str, object]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 4)

        return {
            "decision": str(self.decision),
            "reason": self.reason,
            "estimate": r(self.estimate),
            "interval": [r(self.low), r(self.high)],
            "candidate": {"n": self.candidate.n, "passed": self.candidate.passed},
            "stable": {"n": self.stable.n, "passed": self.stable.passed},
            "candidate_rate": r(self.candidate.rate),
            "stable_rate": r(self.stable.rate),
            "alpha": self.alpha,
            "margin": self.margin,
        }


def _radius(variance: float, *, alpha: float, tau: float) -> float:
    t2 = tau * tau
    return math.sqrt(
        variance
        * (variance + t2)
        / t2
        * (2 * math.log(1 / alpha) + math.log((variance + t2) / variance))
    )


def confidence_sequence(
    candidate: Counts, stable: Counts, *, alpha: float, tau: float
) -> tuple[float, float, float]:
    """(estimate, low, high) of p_candidate - p_stable, valid at every look at level alpha."""
    if candidate.n == 0 or stable.n == 0:
        raise ValueError("both sides need at least one sample")
    estimate = candidate.passed / candidate.n - stable.passed / stable.n
    pc, ps = candidate.smoothed(), stable.smoothed()
    variance = pc * (1 - pc) / candidate.n + ps * (1 - ps) / stable.n
    radius = _radius(variance, alpha=alpha, tau=tau)
    return estimate, estimate - radius, estimate + radius


def judge(candidate: Counts, stable: Counts, test: GuardTest) -> GuardVerdict:
    """The guard's decision on the samples so far (see the module's docstring)."""
    return _decide(candidate, stable, test, confidence_sequence)


@dataclass(frozen=True, slots=True)
class PairCounts:
    """A shadow step's judged pairs by outcome for the candidate (evals.scoring.pairwise)."""

    win: int = 0
    tie: int = 0
    split: int = 0
    loss: int = 0
    unreadable: int = 0

    @property
    def n(self) -> int:
        return self.win + self.tie + self.split + self.loss + self.unreadable

    @property
    def against(self) -> int:
        return self.loss + self.unreadable


def pairs_sequence(pairs: PairCounts, *, alpha: float, tau: float) -> tuple[float, float, float]:
    """(estimate, low, high) of P(win) - P(loss or unreadable), valid at every look."""
    if pairs.n == 0:
        raise ValueError("no pair judged")
    estimate = (pairs.win - pairs.against) / pairs.n
    pw, pl = (pairs.win + 0.5) / (pairs.n + 1), (pairs.against + 0.5) / (pairs.n + 1)
    variance = (pw + pl - (pw - pl) ** 2) / pairs.n
    radius = _radius(variance, alpha=alpha, tau=tau)
    return estimate, estimate - radius, estimate + radius


def judge_pairs(pairs: PairCounts, test: GuardTest) -> GuardVerdict:
    """The shadow pairs' guard (see the module's docstring): the candidate side counts the pairs
    it did not lose (passed = n - losses - unreadable), the stable side the pairs the stable did
    not lose (passed = n - wins), so the figures read as the live checks' do."""
    candidate = Counts(pairs.n, pairs.n - pairs.against)
    stable = Counts(pairs.n, pairs.n - pairs.win)
    return _decide(
        candidate,
        stable,
        test,
        lambda c, s, *, alpha, tau: pairs_sequence(pairs, alpha=alpha, tau=tau),
    )


def _decide(
    candidate: Counts,
    stable: Counts,
    test: GuardTest,
    sequence: Callable[..., tuple[float, float, float]],
) -> GuardVerdict:

    def verdict(
        decision: Decision,
        reason: str,
        estimate: float | None = None,
        low: float | None = None,
        high: float | None = None,
    ) -> GuardVerdict:
        return GuardVerdict(
            decision, reason, estimate, low, high, candidate, stable, test.alpha, test.margin
        )

    floor = MIN_SIDE_SAMPLES
    if candidate.n < floor or stable.n < floor:
        return verdict(
            Decision.HOLD,
            f"too few samples to judge ({candidate.n} candidate, {stable.n} stable; "
            f"{floor} each at least)",
        )
    estimate, low, high = sequence(candidate, stable, alpha=test.alpha, tau=test.mixture_scale)
    if high < 0:
        return verdict(
            Decision.ROLLBACK,
            f"the candidate passes less often than the stable: difference {estimate:+.1%}, "
            f"interval [{low:+.1%}, {high:+.1%}] lies below 0",
            estimate,
            low,
            high,
        )
    needed = test.min_samples
    if candidate.n < needed or stable.n < needed:
        return verdict(
            Decision.HOLD,
            f"{min(candidate.n, stable.n)} samples on the smaller side, {needed} needed",
            estimate,
            low,
            high,
        )
    if low > -test.margin:
        return verdict(
            Decision.ADVANCE,
            f"the candidate is at most {test.margin:.1%} worse: difference {estimate:+.1%}, "
            f"interval [{low:+.1%}, {high:+.1%}]",
            estimate,
            low,
            high,
        )
    return verdict(
        Decision.HOLD,
        f"not enough evidence yet: interval [{low:+.1%}, {high:+.1%}] reaches below "
        f"-{test.margin:.1%}",
        estimate,
        low,
        high,
    )


def combine(verdicts: list[GuardVerdict]) -> Decision:
    """A step's decision over its guards: any rollback rolls back; it advances only when every
    guard says advance; else it holds."""
    decisions = {v.decision for v in verdicts}
    if Decision.ROLLBACK in decisions:
        return Decision.ROLLBACK
    if decisions == {Decision.ADVANCE}:
        return Decision.ADVANCE
    return Decision.HOLD
