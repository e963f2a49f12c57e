"""The real-engine check's part of the cache section, from replay_real.py's saved result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULT = Path(__file__).parent / "results" / "replay_real.json"


def replay_section(path: Path = RESULT) -> list[str]:
    head = ["### The simulator against a real engine", ""]
    if not path.exists():
        return [*head, "Not run yet: `python -m bench.cachesim.replay_real` writes it.", ""]
    r: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    rows = [
        f"| {i} | {s['adapter']} | {s['engine']} | {s['sim']} | "
        f"{'yes' if s['same'] else '**no**'} |"
        for i, s in enumerate(r["steps"])
    ]
    same = sum(1 for s in r["steps"] if s["same"])
    return [
        *head,
        f"{r['summary']}",
        "",
        f"Command: `{r['command']}` ({r['when']}). Engine: {r['engine_flags']}.",
        "",
        f"Result: {same} of {len(r['steps'])} requests classified the same by the engine and by "
        f"the simulator's `lru`; cache contents after each request identical: "
        f"{'yes' if r['contents_match'] else '**no**'}.",
        "",
        "| # | adapter | engine saw | simulator's lru | same |",
        "|---|---|---|---|---|",
        *rows,
        "",
        *[line for note in r.get("notes", []) for line in (note, "")],
    ]
