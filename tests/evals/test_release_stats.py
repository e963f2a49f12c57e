"""The release guard's test (evals.scoring.release_stats): its decisions, and its stated
false-rollback rate checked by simulation with looks after every batch of samples."""

from __future__ import annotations

import random

import pytest

from evals.scoring.release_stats import (
    MIN_SIDE_SAMPLES,
    Counts,
    Decision,
    GuardTest,
    combine,
    confidence_sequence,
    judge,
)


def test_it_holds_below_the_floor_whatever_the_numbers():
    v = judge(Counts(MIN_SIDE_SAMPLES - 1, 0), Counts(500, 500), GuardTest())
    assert v.decision == Decision.HOLD
    assert v.estimate is None and "too few samples" in v.reason


def test_it_rolls_back_a_clearly_bad_candidate_early():
    v = judge(Counts(12, 0), Counts(12, 12), GuardTest(min_samples=200))
    assert v.decision == Decision.ROLLBACK
    assert v.high is not None and v.high < 0
    assert v.as_dict()["candidate"] == {"n": 12, "passed": 0}


def test_it_holds_an_equal_candidate_until_the_steps_sample_then_advances():
    test = GuardTest(min_samples=100)
    assert judge(Counts(50, 50), Counts(50, 50), test).decision == Decision.HOLD
    advanced = judge(Counts(100, 100), Counts(100, 100), test)
    assert advanced.decision == Decision.ADVANCE
    assert advanced.low is not None and advanced.low > -test.margin


def test_it_holds_when_the_interval_reaches_past_the_margin():
    v = judge(Counts(40, 36), Counts(40, 37), GuardTest(min_samples=20))
    assert v.decision == Decision.HOLD and "not enough evidence" in v.reason


def test_the_interval_narrows_with_the_sample_and_holds_the_estimate():
    small = confidence_sequence(Counts(50, 45), Counts(50, 46), alpha=0.05, tau=0.05)
    large = confidence_sequence(Counts(5000, 4500), Counts(5000, 4600), alpha=0.05, tau=0.05)
    assert small[1] < small[0] < small[2]
    assert large[2] - large[1] < small[2] - small[1]
    assert large[0] == pytest.approx(-0.02)


def test_combine_rolls_back_on_any_and_advances_only_on_all():
    adv = judge(Counts(100, 100), Counts(100, 100), GuardTest(min_samples=10))
    bad = judge(Counts(30, 0), Counts(30, 30), GuardTest())
    hold = judge(Counts(1, 1), Counts(1, 1), GuardTest())
    assert combine([adv, adv]) == Decision.ADVANCE
    assert combine([adv, hold]) == Decision.HOLD
    assert combine([adv, hold, bad]) == Decision.ROLLBACK
    assert combine([]) == Decision.HOLD


@pytest.mark.parametrize("bad", [{"alpha": 0}, {"alpha": 1}, {"margin": -0.1}, {"tau": 0}])
def test_a_bad_setting_is_refused(bad):
    with pytest.raises(ValueError):
        GuardTest(**bad)


def test_counts_refuse_more_passed_than_samples():
    with pytest.raises(ValueError):
        Counts(3, 4)


def _sequential_run(rng: random.Random, p_c: float, p_s: float, test: GuardTest) -> Decision:
    """One step watched after every 10 samples a side up to 1000: the first decision that is
    not a hold, as the controller would take it."""
    c = s = 0
    for n in range(10, 1001, 10):
        c += sum(rng.random() < p_c for _ in range(10))
        s += sum(rng.random() < p_s for _ in range(10))
        decision = judge(Counts(n, c), Counts(n, s), test).decision
        if decision != Decision.HOLD:
            return decision
    return Decision.HOLD


def test_an_equal_candidate_is_rolled_back_at_most_at_the_stated_rate_under_repeated_looks():
    rng = random.Random(45)
    test = GuardTest(alpha=0.05, margin=0.05, min_samples=50)
    runs = [_sequential_run(rng, 0.9, 0.9, test) for _ in range(300)]
    false_rollbacks = runs.count(Decision.ROLLBACK)
    # The stated rate is 5 %; the bound holds at every look, so 100 looks cost nothing.
    assert false_rollbacks <= 0.05 * len(runs)
    assert runs.count(Decision.ADVANCE) > 0.8 * len(runs)


def test_a_candidate_much_worse_than_the_margin_is_rolled_back_not_advanced():
    rng = random.Random(7)
    test = GuardTest(alpha=0.05, margin=0.05, min_samples=50)
    runs = [_sequential_run(rng, 0.7, 0.9, test) for _ in range(100)]
    assert runs.count(Decision.ADVANCE) == 0
    assert runs.count(Decision.ROLLBACK) >= 95
