"""A benchmark keeps other sections of docs/benchmarks.md and replaces only its own."""

from __future__ import annotations

import re
from pathlib import Path

from bench.docs_section import markers, write_section

BEGIN, END = markers("cachesim")


def test_it_replaces_its_section_and_keeps_the_others(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        f"# Benchmarks\n\n## Validation\nkeep me\n\n{BEGIN}\nold\n{END}\n\n## Later\nme too\n"
    )
    write_section("cachesim", f"{BEGIN}\nnew\n{END}\n", doc=doc)
    text = doc.read_text()
    assert "keep me" in text and "me too" in text
    assert "new" in text and "old" not in text
    assert text.count(BEGIN) == 1 and text.count(END) == 1


def test_it_appends_when_the_file_has_no_section(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Validation\nkeep me\n")
    write_section("cachesim", f"{BEGIN}\nnew\n{END}\n", doc=doc)
    assert doc.read_text().startswith("# Benchmarks\n\n## Validation\nkeep me\n\n" + BEGIN)


def test_it_says_when_and_at_which_commit(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    write_section("cachesim", f"{BEGIN}\n## Cache\n\ntable\n{END}\n", doc=doc)
    lines = doc.read_text().split("\n")
    stamp = lines[lines.index("## Cache") + 2]
    assert re.fullmatch(r"Recorded 20\d\d-\d\d-\d\d, commit [0-9a-f]{7,}\.", stamp), stamp
