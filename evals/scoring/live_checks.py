"""Checks on live answers, which need no expected answer: the suite scorers that fit (`json`,
`json_schema`, `regex`, `not_contains`), a length bound and the refusal phrases a tenant lists.
An answer passes when every check set passes; a release plan's guard compares the share of the
stable's and the candidate's sampled answers that pass (evals.scoring.release_stats).
"""

from __future__ import annotations

from typing import Any

from evals.scoring.scorers import SCORERS, ExpectError, Verdict

SUITE_CHECKS = ("json", "json_schema", "regex", "not_contains")
MAX_CHARS_LIMIT = 1_000_000
KNOWN = (*SUITE_CHECKS, "max_chars", "refusals")


def check_live_checks(spec: Any) -> dict[str, Any]:
    """The checks as given, or ExpectError naming the first one no scorer can use."""
    if not isinstance(spec, dict):
        raise ExpectError("live_checks must be an object of checks.")
    unknown = sorted(set(spec) - set(KNOWN))
    if unknown:
        raise ExpectError(f"Unknown live check(s) {', '.join(unknown)}; known: {', '.join(KNOWN)}.")
    for name in SUITE_CHECKS:
        if name in spec:
            SCORERS[name][1](spec[name])
    if "max_chars" in spec:
        bound = spec["max_chars"]
        if (
            not isinstance(bound, int)
            or isinstance(bound, bool)
            or not 1 <= bound <= MAX_CHARS_LIMIT
        ):
            raise ExpectError(f"max_chars must be a whole number from 1 to {MAX_CHARS_LIMIT}.")
    if "refusals" in spec:
        SCORERS["not_contains"][1](spec["refusals"])  # the same shape: 1-50 non-empty strings
    return spec


def score_live(answer: str, spec: dict[str, Any]) -> dict[str, Verdict]:
    """Each check's verdict on one answer, in KNOWN's order."""
    out: dict[str, Verdict] = {}
    for name in SUITE_CHECKS:
        if name in spec:
            out[name] = SCORERS[name][0](answer, spec[name])
    if "max_chars" in spec:
        ok = len(answer) <= spec["max_chars"]
        out["max_chars"] = Verdict(ok, "" if ok else f"{len(answer)} characters")
    if "refusals" in spec:
        lowered = answer.casefold()
        found = [p for p in spec["refusals"] if p.casefold() in lowered]
        out["refusals"] = Verdict(not found, f"refuses: {found!r}" if found else "")
    return out


def passes(answer: str, spec: dict[str, Any]) -> bool:
    return all(v.passed for v in score_live(answer, spec).values())
