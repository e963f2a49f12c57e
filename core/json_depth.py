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
    """Whether `root` nests deeper than `limit` (a scalar is 0 deep, [] and {} are 1). Level by
    level, containers only: on the gateway's path it costs about what parsing the body did."""
    level = [root] if isinstance(root, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below = []
        for value in level:
            for item in value.values() if isinstance(value, dict) else value:
                if isinstance(item, dict | list):
                    below.append(item)
        level = below
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
