"""Reading an eval suite: JSON Lines, one case a line, checked whole before anything is kept.

A case is `{"id", "messages" | "prompt", "max_tokens"?, "expect"?: {...}, "must_pass"?, "tags"?}`.
Every bad line is reported with its number and the reason; a file with any bad line is refused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from evals.scoring.scorers import SCORERS, ExpectError, check_expect, json_depth

CASE_KEYS = frozenset({"id", "messages", "prompt", "max_tokens", "expect", "must_pass", "tags"})
ROLES = frozenset({"system", "user", "assistant"})
MAX_ID_CHARS = 100
MAX_TAGS = 20
MAX_TAG_CHARS = 40
# A case nests 3-4 levels, a json_schema a few more: deeper only serves to exhaust the parser's
# or a schema walk's recursion (a line nested 100,000 deep fits the size limit).
MAX_CASE_DEPTH = 64
DEFAULT_MAX_TOKENS = 64
# Errors listed in one refusal: enough to fix a file in one go, never a response the size of it.
MAX_REPORTED = 20


@dataclass(frozen=True)
class SuiteLimits:
    max_cases: int
    max_bytes: int
    max_case_tokens: int


@dataclass(frozen=True)
class LineError:
    line: int  # 1-based; 0 for the file as a whole
    code: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class Case:
    id: str
    max_tokens: int
    messages: list[dict[str, str]] | None = None
    prompt: str | None = None
    expect: dict[str, Any] = field(default_factory=dict)
    must_pass: bool = False
    tags: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.id, "max_tokens": self.max_tokens}
        if self.messages is not None:
            body["messages"] = self.messages
        else:
            body["prompt"] = self.prompt
        body.update(expect=self.expect, must_pass=self.must_pass, tags=list(self.tags))
        return body


@dataclass(frozen=True)
class ParsedSuite:
    sha256: str
    size_bytes: int
    cases: list[Case]
    errors: list[LineError]

    @property
    def ok(self) -> bool:
        return not self.errors


class CaseError(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_suite(raw: bytes, limits: SuiteLimits) -> ParsedSuite:
    """Every case of `raw`, or every error (up to MAX_REPORTED) with its line number."""
    digest = hashlib.sha256(raw).hexdigest()
    size = len(raw)
    if size > limits.max_bytes:
        return _refused(
            digest,
            size,
            "suite.too_large",
            f"The file is {size} bytes; your plan allows {limits.max_bytes} bytes per suite.",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = raw[: exc.start].count(b"\n") + 1
        return ParsedSuite(digest, size, [], [LineError(where, "case.not_utf8", "Not UTF-8 text.")])
    cases: list[Case] = []
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    # Split on newlines only, as editors number lines (str.splitlines also splits on \x0b, \u2028...).
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue  # blank lines (a trailing newline, a spacer) carry nothing
        try:
            case = parse_case(line, limits)
            if case.id in seen:
                raise CaseError(
                    "case.duplicate_id", f"id '{case.id}' is already on line {seen[case.id]}."
                )
        except CaseError as exc:
            errors.append(LineError(number, exc.code, str(exc)))
            if len(errors) >= MAX_REPORTED:
                break
            continue
        seen[case.id] = number
        cases.append(case)
    if not errors and not cases:
        errors.append(LineError(0, "suite.empty", "The file has no cases."))
    if not errors and len(cases) > limits.max_cases:
        errors.append(
            LineError(
                0,
                "suite.too_many_cases",
                f"The file has {len(cases)} cases; your plan allows {limits.max_cases} per suite.",
            )
        )
    return ParsedSuite(digest, size, [] if errors else cases, errors)


def _refused(digest: str, size: int, code: str, message: str) -> ParsedSuite:
    return ParsedSuite(digest, size, [], [LineError(0, code, message)])


def parse_case(line: str, limits: SuiteLimits) -> Case:
    try:
        obj = json.loads(line, parse_constant=_no_constant)
    except CaseError:
        raise
    except RecursionError:
        obj = _TOO_DEEP  # deeper than the interpreter's stack: refused as too deep, below
    except ValueError as exc:
        raise CaseError("case.not_json", f"Not JSON: {exc}.") from None
    if obj is _TOO_DEEP or json_depth(obj, stop_at=MAX_CASE_DEPTH) > MAX_CASE_DEPTH:
        raise CaseError(
            "case.too_deep", f"The case nests deeper than {MAX_CASE_DEPTH} levels of JSON."
        )
    if not isinstance(obj, dict):
        raise CaseError("case.not_object", "A case is a JSON object.")
    unknown = sorted(set(obj) - CASE_KEYS)
    if unknown:
        raise CaseError("case.unknown_key", f"Unknown key(s): {', '.join(unknown)}.")
    case_id = obj.get("id")
    if not isinstance(case_id, str) or not case_id.strip() or len(case_id) > MAX_ID_CHARS:
        raise CaseError(
            "case.bad_id", f"id must be a non-empty string of at most {MAX_ID_CHARS} characters."
        )
    messages, prompt = _input(obj)
    max_tokens = obj.get("max_tokens", min(DEFAULT_MAX_TOKENS, limits.max_case_tokens))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise CaseError("case.bad_max_tokens", "max_tokens must be a positive integer.")
    if max_tokens > limits.max_case_tokens:
        raise CaseError(
            "case.max_tokens_over_plan",
            f"max_tokens {max_tokens} is over your plan's {limits.max_case_tokens} per case.",
        )
    expect = obj.get("expect", {})
    if not isinstance(expect, dict):
        raise CaseError("case.bad_expect", "expect must be an object keyed by scorer.")
    try:
        check_expect(expect)
    except ExpectError as exc:
        raise CaseError("case.bad_expect", str(exc)) from None
    must_pass = obj.get("must_pass", False)
    if not isinstance(must_pass, bool):
        raise CaseError("case.bad_must_pass", "must_pass must be true or false.")
    if must_pass and not expect:
        raise CaseError(
            "case.must_pass_without_expect", "A must_pass case needs at least one scorer in expect."
        )
    return Case(
        case_id, max_tokens, messages, prompt, expect, must_pass, _tags(obj.get("tags", []))
    )


_TOO_DEEP = object()


def _no_constant(name: str) -> None:
    raise CaseError("case.not_json", f"Not JSON: {name} is not a JSON number.")


def _input(obj: dict[str, Any]) -> tuple[list[dict[str, str]] | None, str | None]:
    has_messages, has_prompt = "messages" in obj, "prompt" in obj
    if has_messages == has_prompt:
        raise CaseError("case.input", "Give exactly one of messages or prompt.")
    if has_prompt:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise CaseError("case.bad_prompt", "prompt must be a non-empty string.")
        return None, obj["prompt"]
    messages = obj["messages"]
    if not isinstance(messages, list) or not messages:
        raise CaseError("case.bad_messages", "messages must be a non-empty list.")
    for i, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or set(message) != {"role", "content"}
            or message["role"] not in ROLES
            or not isinstance(message["content"], str)
        ):
            raise CaseError(
                "case.bad_messages",
                f"messages[{i}] must be {{role: {'|'.join(sorted(ROLES))}, content: string}}.",
            )
    return messages, None


def _tags(tags: Any) -> tuple[str, ...]:
    if (
        not isinstance(tags, list)
        or len(tags) > MAX_TAGS
        or not all(isinstance(t, str) and 0 < len(t) <= MAX_TAG_CHARS for t in tags)
    ):
        raise CaseError(
            "case.bad_tags",
            f"tags must be a list of at most {MAX_TAGS} strings of 1-{MAX_TAG_CHARS} characters.",
        )
    return tuple(dict.fromkeys(tags))


__all__ = ["SCORERS", "Case", "LineError", "ParsedSuite", "SuiteLimits", "parse_suite"]
