"""The scorers, one small function per key of a case's `expect`, and the check of their specs.

Each scorer answers (passed, why) for one answer. A tenant's pattern runs on RE2, whose time is
linear in the answer, so a pattern such as `(a+)+$` cannot stall a worker; json_schema's own
`pattern` keyword runs on RE2 too (patternProperties is refused: jsonschema would run it on
Python's backtracking engine). RE2 and jsonschema are imported when first needed: every portal
process loads this module (the upload API checks suites), and few of them score anything.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

MAX_PATTERN_CHARS = 1000
MAX_STRINGS = 50
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")  # fixed pattern: ours, not a tenant's


class ExpectError(ValueError):
    """A spec in `expect` that no scorer can use; the message names the scorer."""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "why": self.why}


# --- the scorers ---


def score_exact(answer: str, spec: Any) -> Verdict:
    # Surrounding whitespace is the model's formatting, not its answer.
    got = answer.strip()
    return Verdict(got == spec.strip(), "" if got == spec.strip() else f"expected {spec!r}")


def score_contains(answer: str, spec: Any) -> Verdict:
    missing = [s for s in spec if s not in answer]
    return Verdict(not missing, f"missing {missing!r}" if missing else "")


def score_not_contains(answer: str, spec: Any) -> Verdict:
    found = [s for s in spec if s in answer]
    return Verdict(not found, f"contains {found!r}" if found else "")


def score_regex(answer: str, spec: Any) -> Verdict:
    hit = _re2(spec).search(answer) is not None
    return Verdict(hit, "" if hit else f"no match for {spec!r}")


def score_json(answer: str, spec: Any) -> Verdict:
    try:
        json.loads(answer)
    except ValueError as exc:
        return Verdict(not spec, f"not JSON: {exc}" if spec else "")
    return Verdict(bool(spec), "" if spec else "is JSON")


def score_json_schema(answer: str, spec: Any) -> Verdict:
    try:
        value = json.loads(answer)
    except ValueError as exc:
        return Verdict(False, f"not JSON: {exc}")
    from jsonschema.exceptions import best_match

    error = best_match(_schema_validator()(spec).iter_errors(value))
    return Verdict(error is None, "" if error is None else error.message[:300])


def score_number(answer: str, spec: Any) -> Verdict:
    found = NUMBER.search(answer)
    if found is None:
        return Verdict(False, "no number in the answer")
    got = float(found.group())
    ok = math.isfinite(got) and abs(got - spec["value"]) <= spec.get("tolerance", 0)
    return Verdict(
        ok, "" if ok else f"{got:g} is not {spec['value']:g} ± {spec.get('tolerance', 0):g}"
    )


# --- checking a spec when the suite is uploaded ---


def _strings(name: str, spec: Any) -> None:
    if (
        not isinstance(spec, list)
        or not spec
        or len(spec) > MAX_STRINGS
        or not all(isinstance(s, str) and s for s in spec)
    ):
        raise ExpectError(f"{name} must be a list of 1-{MAX_STRINGS} non-empty strings.")


def _check_exact(spec: Any) -> None:
    if not isinstance(spec, str):
        raise ExpectError("exact must be a string.")


def _check_contains(spec: Any) -> None:
    _strings("contains", spec)


def _check_not_contains(spec: Any) -> None:
    _strings("not_contains", spec)


def _check_regex(spec: Any) -> None:
    if not isinstance(spec, str) or not spec or len(spec) > MAX_PATTERN_CHARS:
        raise ExpectError(f"regex must be a pattern of 1-{MAX_PATTERN_CHARS} characters.")
    import re2

    try:
        _re2(spec)
    except re2.error as exc:
        raise ExpectError(f"regex is not a pattern RE2 accepts: {exc}.") from None


def _check_json(spec: Any) -> None:
    if not isinstance(spec, bool):
        raise ExpectError("json must be true or false.")


def _check_json_schema(spec: Any) -> None:
    if not isinstance(spec, dict):
        raise ExpectError("json_schema must be an object (a JSON Schema).")
    if any(key == "patternProperties" for key in _keys(spec)):
        raise ExpectError("json_schema may not use patternProperties; use pattern on properties.")
    from jsonschema.exceptions import SchemaError

    try:
        _schema_validator().check_schema(spec)
    except SchemaError as exc:
        raise ExpectError(f"json_schema is not a valid schema: {exc.message}.") from None
    for pattern in _patterns(spec):
        _check_regex(pattern)


def _check_number(spec: Any) -> None:
    if (
        not isinstance(spec, dict)
        or not set(spec) <= {"value", "tolerance"}
        or not _finite(spec.get("value"))
        or ("tolerance" in spec and (not _finite(spec["tolerance"]) or spec["tolerance"] < 0))
    ):
        raise ExpectError("number must be {value: number, tolerance?: number >= 0}.")


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


Scorer = Callable[[str, Any], Verdict]
# expect key -> (scorer, the check of its spec); the order is the order verdicts are shown in.
SCORERS: dict[str, tuple[Scorer, Callable[[Any], None]]] = {
    "exact": (score_exact, _check_exact),
    "contains": (score_contains, _check_contains),
    "not_contains": (score_not_contains, _check_not_contains),
    "regex": (score_regex, _check_regex),
    "json": (score_json, _check_json),
    "json_schema": (score_json_schema, _check_json_schema),
    "number": (score_number, _check_number),
}


def check_expect(expect: dict[str, Any]) -> None:
    unknown = sorted(set(expect) - set(SCORERS))
    if unknown:
        raise ExpectError(f"Unknown scorer(s) {', '.join(unknown)}; known: {', '.join(SCORERS)}.")
    for name, spec in expect.items():
        SCORERS[name][1](spec)


def score_answer(answer: str, expect: dict[str, Any]) -> dict[str, Verdict]:
    """Each scorer's verdict on one answer, in SCORERS' order."""
    return {name: SCORERS[name][0](answer, expect[name]) for name in SCORERS if name in expect}


# --- RE2 and the schema validator that uses it ---

_COMPILED: dict[str, Any] = {}


def _re2(pattern: str) -> Any:
    compiled = _COMPILED.get(pattern)
    if compiled is None:
        import re2

        options = re2.Options()
        options.max_mem = 8 << 20  # a pattern whose automaton needs more is refused, not run
        options.log_errors = False
        compiled = re2.compile(pattern, options)
        if len(_COMPILED) < 1024:
            _COMPILED[pattern] = compiled
    return compiled


def _re2_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema import ValidationError

    if validator.is_type(instance, "string") and _re2(pattern).search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _schema_validator() -> Any:
    """Draft 2020-12, its `pattern` keyword on RE2."""
    from jsonschema import validators

    return validators.extend(validators.Draft202012Validator, validators={"pattern": _re2_pattern})


def _keys(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from _keys(item)


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            yield from _patterns(value)
    elif isinstance(node, list):
        for item in node:
            yield from _patterns(item)
