"""Each scorer on an answer that passes and one that fails; the spec checks; RE2's linear time
on a pattern that stalls a backtracking engine (the pairwise judge: test_pairwise.py)."""

from __future__ import annotations

import time

import pytest

from evals.scoring.scorers import ExpectError, check_expect, score_answer


@pytest.mark.parametrize(
    ("expect", "good", "bad"),
    [
        ({"exact": "Paris"}, " Paris\n", "Paris, France"),
        ({"contains": ["refund", "30 days"]}, "A refund within 30 days.", "A refund soon."),
        ({"not_contains": ["password"]}, "I cannot help.", "Your password is x"),
        ({"regex": r"^order #\d{4}$"}, "order #1234", "order #12"),
        ({"json": True}, '{"a": 1}', "{a: 1}"),
        (
            {
                "json_schema": {
                    "type": "object",
                    "required": ["a"],
                    "properties": {"a": {"type": "integer"}},
                }
            },
            '{"a": 3}',
            '{"a": "3"}',
        ),
        ({"json_schema": {"type": "string", "pattern": "^[a-z]+$"}}, '"abc"', '"ABC"'),
        ({"number": {"value": 42, "tolerance": 0.5}}, "The answer is 42.3", "The answer is 43"),
    ],
)
def test_each_scorer_passes_and_fails(expect, good, bad):
    check_expect(expect)
    (name,) = expect
    assert score_answer(good, expect)[name].passed is True
    failed = score_answer(bad, expect)[name]
    assert failed.passed is False and failed.why


def test_several_scorers_each_give_a_verdict_in_a_fixed_order():
    verdicts = score_answer("42", {"number": {"value": 42}, "exact": "42", "json": True})
    assert list(verdicts) == ["exact", "json", "number"]
    assert all(v.passed for v in verdicts.values())


@pytest.mark.parametrize(
    ("expect", "says"),
    [
        ({"exactly": "x"}, "Unknown scorer"),
        ({"exact": 3}, "exact must be a string"),
        ({"contains": []}, "contains must be a list"),
        ({"regex": "(unclosed"}, "RE2"),
        ({"regex": r"(a)\1"}, "RE2"),  # backreferences need backtracking: refused
        ({"json_schema": {"type": "nonsense"}}, "not a valid schema"),
        ({"json_schema": {"patternProperties": {"(a+)+$": {}}}}, "patternProperties"),
        ({"number": {"value": "4"}}, "number must be"),
        ({"number": {"value": 4, "tolerance": -1}}, "number must be"),
    ],
)
def test_a_spec_no_scorer_can_use_is_refused_with_the_reason(expect, says):
    with pytest.raises(ExpectError, match=says):
        check_expect(expect)


def test_a_catastrophic_pattern_is_answered_in_linear_time():
    """`(a+)+$` on 'aaa…b' takes exponential time on a backtracking engine (Python's re needs
    minutes at 40 characters); RE2 answers 100,000 characters at once."""
    answer = "a" * 100_000 + "b"
    started = time.perf_counter()
    verdict = score_answer(answer, {"regex": "(a+)+$"})["regex"]
    assert verdict.passed is False
    assert time.perf_counter() - started < 0.5
    schema = {"json_schema": {"type": "string", "pattern": "^(a+)+$"}}
    started = time.perf_counter()
    assert score_answer(f'"{answer}"', schema)["json_schema"].passed is False
    assert time.perf_counter() - started < 0.5
