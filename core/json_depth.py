"""Bounded JSON nesting for what callers send: a depth found without recursion, and a json.loads
that answers ValueError, never RecursionError, for a document nested past the interpreter's stack.

A body of 100,000 `[` fits every size cap; Python's parser raises RecursionError on it (not a
ValueError, so `except ValueError` handlers let it through as a 500), and a walk that recurses
over a parsed document nested a few hundred levels does the same, as does orjson.dumps past 254.
"""

from __future__ import annotations

import json
from typing import Any


def deeper_than(root: Any, limit: int) -> bool:
    """Whether `root` nests deeper than `limit` (a scalar is 0 deep, [] and {} are 1)."""
    stack: list[tuple[Any, int]] = [(root, 1)] if isinstance(root, dict | list) else []
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        items = value.values() if isinstance(value, dict) else value
        stack.extend((item, depth + 1) for item in items if isinstance(item, dict | list))
    return False


def loads_bounded(text: str | bytes, max_depth: int, **kwargs: Any) -> Any:
    """json.loads(text), or ValueError when it is not JSON or nests deeper than `max_depth`."""
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    if deeper_than(value, max_depth):
        raise ValueError(f"nested deeper than {max_depth} levels")
    return value
