"""Strict JSON for untrusted headers and configs: UTF-8 only, one value per key, no NaN/Infinity.

Python's json module accepts duplicate keys (last wins) and NaN/Infinity literals; another parser
(the engine's, Rust's serde) may pick differently, so anything ambiguous is refused here.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # real headers and configs nest 3-4 levels; deep nesting only serves attacks


class StrictJSONError(ValueError):
    """kind is one of: not_utf8, invalid, duplicate_key, nan_literal."""

    def __init__(self, kind: str, detail: str, *, key: str = "", literal: str = "") -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.key = key
        self.literal = literal


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJSONError("duplicate_key", f"duplicate key {key!r}", key=key)
        result[key] = value
    return result


def _refuse_constant(literal: str) -> Any:
    raise StrictJSONError("nan_literal", f"{literal} literal", literal=literal)


def _check_values(root: Any) -> None:
    """Refuse NUL and unpaired surrogates (no database stores them) and deep nesting."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise StrictJSONError("invalid", f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            _check_string(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_string(key)
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def _check_string(text: str) -> None:
    if "\x00" in text:
        raise StrictJSONError("invalid", "a string contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise StrictJSONError("invalid", "a string contains an unpaired surrogate") from None


def loads_strict(raw: bytes) -> Any:
    """Parse `raw` or raise StrictJSONError; never raises anything else for any input bytes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrictJSONError("not_utf8", f"invalid byte at offset {exc.start}") from None
    try:
        value = json.loads(
            text, object_pairs_hook=_pairs_without_duplicates, parse_constant=_refuse_constant
        )
    except StrictJSONError:
        raise
    except RecursionError:
        raise StrictJSONError("invalid", "nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and int() refusing thousands of digits
        raise StrictJSONError("invalid", str(exc).split(":")[0][:100]) from None
    _check_values(value)
    return value
