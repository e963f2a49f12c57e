"""Renders docs/reliability.md's table from the fault suite's records (tests/faults/record.py):

    .venv/bin/python -m pytest tests/faults      # measures, writes var/faults/*.json
    .venv/bin/python -m tests.faults.reliability_doc

(`make reliability-doc` does both.) Only the text between the table's markers is rewritten.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.docs_section import write_section
from tests.faults.record import REPO, FaultRecord, read_records

DOC = REPO / "docs" / "reliability.md"
SECTION = "fault-table"
PARTS = ("portal", "workers", "storage", "engine", "gateway")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(records: list[FaultRecord]) -> str:
    order = {part: i for i, part in enumerate(PARTS)}
    rows = sorted(records, key=lambda r: (order.get(r.part, len(PARTS)), r.fault))
    lines = [
        "<!-- fault-table:begin -->",
        "| part | fault | what a caller saw meanwhile | healed after (s, no hand) | lost | "
        "measured by |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        heal = "-" if r.heal_s is None else f"{r.heal_s:.2f}"
        lines.append(
            f"| {r.part} | {_cell(r.title)} | {_cell(r.caller_saw)} | {heal} | {_cell(r.lost)} "
            f"| `{r.test}` ({r.measured_at[:10]}) |"
        )
    lines.append("<!-- fault-table:end -->")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args()
    records = read_records()
    if not records:
        raise SystemExit("no fault records in var/faults: run `pytest tests/faults` first")
    write_section(SECTION, render(records), doc=args.doc)
    print(f"{args.doc}: {len(records)} faults")


if __name__ == "__main__":
    main()
