"""Strict JSON for untrusted headers and configs: UTF-8 only, one value per key, no NaN/Infinity,
numbers every parser reads alike, bounded nesting; in time linear in the input.

Python's json module accepts duplicate keys (last wins), NaN/Infinity literals, 1e400 (as inf) and
integers of thousands of digits (converted in quadratic time); another parser (the engine's,
Rust's serde, PostgreSQL's jsonb) may read them differently or not at all, so anything ambiguous
or out of range is refused here.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64  # real headers and configs nest 3-4 levels; deep nesting only serves attacks
# u64 has 20 digits: no offset, size or count of a real header or config needs more, and
# refusing longer literals before int() keeps parsing linear whatever sys.int_info allows.
MAX_INT_DIGITS = 20
# Only escapes can put NUL or an unpaired surrogate into a decoded string (strict UTF-8
# decoding refuses both as raw bytes), so the walk over every string runs only when one is there.
_SUSPICIOUS_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


class StrictJSONError(ValueError):
    """kind is one of: not_utf8, invalid, duplicate_key, nan_literal."""

    def __init__(self, kind: str, detail: str, *, key: str = "", literal: str = "") -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.key = key
        self.literal = literal


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)  # in C; the slow search below runs only when a key repeats
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError("duplicate_key", f"duplicate key {key!r}", key=key)
            seen.add(key)
    return result


def _refuse_constant(literal: str) -> Any:
    raise StrictJSONError("nan_literal", f"{literal} literal", literal=literal)


def _bounded_int(literal: str) -> int:
    if len(literal) - literal.startswith("-") > MAX_INT_DIGITS:
        raise StrictJSONError(
            "invalid", f"an integer has more than {MAX_INT_DIGITS} digits ({literal[:24]}...)"
        )
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)  # linear: float() never does big-integer arithmetic
    if not math.isfinite(value):
        raise StrictJSONError("invalid", f"the number {literal[:24]} is out of range")
    return value


def _check_values(root: Any, *, strings: bool) -> None:
    """Refuse deep nesting and, when `strings`, NUL and unpaired surrogates (no database stores
    them). Iterative; only containers (and strings, when asked) are visited."""
    if strings and isinstance(root, str):
        check_string(root)
    stack: list[tuple[Any, int]] = [(root, 1)] if isinstance(root, dict | list) else []
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            check_string(value)
            continue
        if value and depth >= MAX_DEPTH:  # its items would sit deeper than MAX_DEPTH
            raise StrictJSONError("invalid", f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            if strings:
                for key in value:
                    check_string(key)
            items: Any = value.values()
        else:
            items = value
        stack.extend(
            (item, depth + 1)
            for item in items
            if isinstance(item, dict | list) or (strings and isinstance(item, str))
        )


def check_string(text: str) -> None:
    """Refuse NUL and unpaired surrogates (StrictJSONError, kind invalid)."""
    if "\x00" in text:
        raise StrictJSONError("invalid", "a string contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise StrictJSONError("invalid", "a string contains an unpaired surrogate") from None


def loads_strict(raw: bytes, *, check_values: bool = True) -> Any:
    """Parse `raw` or raise StrictJSONError; never raises anything else for any input bytes.

    `check_values=False` skips the walk over the whole document (nesting, NUL, surrogates) for a
    caller that checks it against a fixed schema instead: the schema bounds the nesting and the
    caller runs check_string on the strings it keeps. On a hostile megabyte the walk costs more
    than the parse itself.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrictJSONError("not_utf8", f"invalid byte at offset {exc.start}") from None
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs_without_duplicates,
            parse_constant=_refuse_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
        )
    except StrictJSONError:
        raise
    except RecursionError:
        raise StrictJSONError("invalid", "nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError
        raise StrictJSONError("invalid", str(exc).split(":")[0][:100]) from None
    if check_values:
        _check_values(value, strings=_SUSPICIOUS_ESCAPE.search(text) is not None)
    return value
