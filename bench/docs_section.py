"""Each benchmark owns one marked section of docs/benchmarks.md and rewrites only that."""

from __future__ import annotations

import argparse
import datetime
import subprocess
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


STAMP_PREFIX = "Recorded "


def stamped(section: str) -> str:
    """`section` with a line saying when and at which commit it was measured, under its heading
    (once: a section that already carries one keeps it)."""
    if STAMP_PREFIX + "20" in section:
        return section
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=DOCS.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    stamp = f"{STAMP_PREFIX}{datetime.datetime.now(datetime.UTC):%Y-%m-%d}, commit {commit}."
    lines = section.split("\n")
    at = next((i for i, line in enumerate(lines) if line.startswith("#")), None)
    if at is None:
        return section
    return "\n".join([*lines[: at + 1], "", stamp, *lines[at + 1 :]])


def write_section(name: str, section: str, *, doc: Path = DOCS) -> None:
    """Replace the text between `name`'s markers (which `section` carries) or append it; the
    section says when and at which commit it was measured."""
    begin, end = markers(name)
    section = stamped(section)
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")


def add_report_arguments(parser: argparse.ArgumentParser, *, keep_db: bool = True) -> None:
    """The options every engine benchmark's report takes: write the section, keep the bench
    database, add a paragraph, or render the last run's result.json without measuring."""
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    if keep_db:
        parser.add_argument("--keep-db", action="store_true", help="leave the database to inspect")
    parser.add_argument("--note", action="append", default=[], help="a paragraph to add")
    parser.add_argument(
        "--render-only",
        metavar="COMMAND",
        help="no measuring: render the last run's result.json, run as COMMAND",
    )
