"""The scorers, one small function per key of a case's `expect`, and the check of their specs.

Each scorer answers (passed, why) for one answer, in bounded time and without leaving the process.
A tenant's pattern runs on RE2, whose time is linear in the answer, so a pattern such as `(a+)+$`
cannot stall a worker; json_schema's own `pattern` keyword runs on RE2 too (patternProperties is
refused: jsonschema would run it on Python's backtracking engine). A schema refers only inside
itself: its validator's registry retrieves nothing (no URL, no file), and every keyword it applies
counts against a budget of steps and a deadline, so a schema whose references multiply its work
ends as a failure, not a stalled worker. An answer longer than MAX_ANSWER_CHARS or nested deeper
than MAX_ANSWER_DEPTH is not scored (a failure that says so). RE2 and jsonschema are imported when
first needed: every portal process loads this module (the upload API checks suites), and few of
them score anything.
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

MAX_PATTERN_CHARS = 1000
MAX_STRINGS = 50
# What one answer may cost its scorers. Answers are bounded by a case's max_tokens (256 by
# default): 100,000 characters is far beyond any plan's answer and keeps every scorer's pass over
# it (RE2 is linear) well under a second.
MAX_ANSWER_CHARS = 100_000
# An answer parsed as JSON deeper than this is refused before a schema walks it (a walk recurses).
MAX_ANSWER_DEPTH = 64
# A schema's keywords applied to one answer, and the wall-clock time they may take: a schema
# whose internal references fan out ({"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": ...}]} chained)
# would otherwise take 2^n steps. An answer of a few thousand tokens takes a few thousand steps
# (one per keyword per value it applies to); the deadline holds when the machine is slow.
MAX_SCHEMA_STEPS = 20_000
SCHEMA_DEADLINE_SECONDS = 1.0
# The keywords that name another resource: a suite's schema may point only inside itself.
REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$id")
# Keywords refused at upload: their work escapes the step budget (jsonschema computes what they
# need by walking subschemas and references itself, not through the counted keywords).
UNBOUNDED_KEYWORDS = ("patternProperties", "unevaluatedItems", "unevaluatedProperties")
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
        _answer_json(answer)
    except ValueError as exc:
        return Verdict(not spec, f"not JSON: {exc}" if spec else "")
    return Verdict(bool(spec), "" if spec else "is JSON")


def score_json_schema(answer: str, spec: Any) -> Verdict:
    try:
        value = _answer_json(answer)
    except ValueError as exc:
        return Verdict(False, f"not JSON: {exc}")
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable

    budget = _SchemaBudget()
    token = _BUDGET.set(budget)
    try:
        error = best_match(_validator_for(spec).iter_errors(value))
    except _OverBudget as exc:
        return Verdict(False, f"not scored: {exc}; scored as a failure")
    except Unresolvable as exc:
        ref = getattr(exc, "ref", "")
        return Verdict(
            False,
            f"the schema refers to {str(ref)[:200]!r}, which is not inside it; nothing outside "
            "a suite is fetched: scored as a failure",
        )
    except RecursionError:
        return Verdict(False, "not scored: the schema's references recurse without end")
    finally:
        _BUDGET.reset(token)
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
    unbounded = sorted({key for key in _keys(spec) if key in UNBOUNDED_KEYWORDS})
    if unbounded:
        raise ExpectError(f"json_schema may not use {', '.join(unbounded)}.")
    for keyword, target in _references(spec):
        if not target.startswith("#"):
            raise ExpectError(
                f"json_schema may refer only inside itself ('#...'): {keyword} {target[:200]!r} "
                "points outside it, and nothing outside a suite is fetched."
            )
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
    if len(answer) > MAX_ANSWER_CHARS:
        over = Verdict(
            False, f"not scored: the answer is over {MAX_ANSWER_CHARS} characters ({len(answer)})"
        )
        return {name: over for name in SCORERS if name in expect}
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
    """Draft 2020-12, its `pattern` keyword on RE2, `uniqueItems` in linear time, every keyword
    counted against the answer's budget, the keywords whose work cannot be counted refused."""
    from jsonschema import validators

    base = validators.Draft202012Validator
    own = {
        **base.VALIDATORS,
        "pattern": _re2_pattern,
        "uniqueItems": _unique_items,
        **{name: _not_scored(name) for name in UNBOUNDED_KEYWORDS},
    }
    return validators.extend(base, validators={k: _counted(f) for k, f in own.items()})


def _validator_for(schema: dict[str, Any]) -> Any:
    """A validator whose registry holds nothing and retrieves nothing: a reference outside the
    schema raises Unresolvable instead of reaching a URL or a file."""
    from referencing import Registry

    registry: Any = Registry(retrieve=_retrieve_nothing)  # type: ignore[call-arg]
    return _schema_validator()(schema, registry=registry)


def _retrieve_nothing(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(uri)


class _OverBudget(Exception):
    """The schema's steps or time for one answer ran out."""


class _SchemaBudget:
    __slots__ = ("deadline", "steps")

    def __init__(self) -> None:
        self.steps = 0
        self.deadline = time.monotonic() + SCHEMA_DEADLINE_SECONDS

    def spend(self) -> None:
        self.steps += 1
        if self.steps > MAX_SCHEMA_STEPS:
            raise _OverBudget(f"the schema took over {MAX_SCHEMA_STEPS} steps on this answer")
        if time.monotonic() > self.deadline:
            raise _OverBudget(f"the schema took over {SCHEMA_DEADLINE_SECONDS:g} s on this answer")


# The budget of the answer being scored (one per call of score_json_schema, in this context).
_BUDGET: contextvars.ContextVar[_SchemaBudget | None] = contextvars.ContextVar(
    "schema_budget", default=None
)


def _counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:  # None: check_schema, validating a schema against the metaschema
            budget.spend()
        return keyword(validator, value, instance, schema)

    return counted


def _not_scored(name: str) -> Callable[..., Iterator[Any]]:
    def refuse(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        from jsonschema import ValidationError

        yield ValidationError(f"{name} is not supported by the json_schema scorer")

    return refuse


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    # jsonschema compares every pair of objects (quadratic); one hashable form per item is linear.
    from jsonschema import ValidationError

    if unique and validator.is_type(instance, "array"):
        seen: set[Any] = set()
        for item in instance:
            key = _hashable(item)
            if key in seen:
                yield ValidationError(f"{item!r} is not unique in the array"[:300])
                return
            seen.add(key)


def _hashable(value: Any) -> Any:
    """Equal as JSON Schema compares (1 == 1.0, True != 1) iff equal here; the answer's depth is
    bounded (MAX_ANSWER_DEPTH), so the recursion is."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, dict):
        return ("object", frozenset((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_hashable(v) for v in value))
    return ("other", value)  # str, None


def _answer_json(answer: str) -> Any:
    """The answer as JSON, or ValueError (also for nesting deeper than MAX_ANSWER_DEPTH)."""
    try:
        value = json.loads(answer)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_ANSWER_DEPTH} levels") from None
    if json_depth(value) > MAX_ANSWER_DEPTH:
        raise ValueError(f"nested deeper than {MAX_ANSWER_DEPTH} levels")
    return value


def json_depth(root: Any, stop_at: int = MAX_ANSWER_DEPTH) -> int:
    """How deep `root` nests (a scalar is 0, [] is 1), counted without recursion; stops counting
    once past `stop_at`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(root, 1)] if isinstance(root, dict | list) else []
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > stop_at:
            break
        items = value.values() if isinstance(value, dict) else value
        stack.extend((item, depth + 1) for item in items if isinstance(item, dict | list))
    return deepest


def _references(node: Any) -> Iterator[tuple[str, str]]:
    """Every ($ref | $dynamicRef | $id, its target) in a schema; conservative: a key of that name
    anywhere (in an `enum` or `const` too) counts."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            for key, value in current.items():
                if key in REFERENCE_KEYWORDS and isinstance(value, str):
                    yield key, value
                stack.append(value)
        elif isinstance(current, list):
            stack.extend(current)


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
