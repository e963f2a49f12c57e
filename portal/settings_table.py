"""README's settings table, generated from the settings' declarations: the reader calls of
portal/settings.py (portal.env), each with its name, type, default and `doc`.

    python -m portal.settings_table          # print the table
    python -m portal.settings_table --write  # rewrite it in README.md, between its markers

Read from the source, not from a run of the settings, so a setting read only in some
configurations (PostgreSQL's pool) is in the table whatever the environment.
tests/portal/test_settings_table.py fails when README's table differs from this one.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "portal" / "settings.py"
README = ROOT / "README.md"
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"
# portal.env's readers and the type each reads.
READERS = {
    "env_str": "text",
    "env_bool": "boolean",
    "env_int": "integer",
    "env_float": "number",
    "env_list": "list",
    "env_choice": "choice",
    "env_json_object": "JSON object",
    "env_proxy_ssl_header": "header",
    "env_oidc_providers": "JSON list",
}


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str
    default: str  # as the table prints it
    doc: str
    line: int


def _shown(default: Any) -> str:
    """A literal default as the table prints it."""
    if default is None:
        return "required"
    if default in ("", [], (), {}):
        return "empty"
    if isinstance(default, bool):
        return "`1`" if default else "`0`"
    if isinstance(default, list | tuple):
        return "`" + ",".join(str(d) for d in default) + "`"
    if isinstance(default, dict):
        return "`" + json.dumps(default) + "`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _literal(node: ast.expr | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return ...  # computed: the declaration must say how it reads (`shown`)


def _reader(call: ast.Call) -> str | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name if name in READERS else None


def declarations(source: str | None = None) -> list[Setting]:
    """Each setting portal/settings.py (or `source`) reads, first read first; a name read twice
    is declared by its read that has a `doc`."""
    found: dict[str, Setting] = {}
    for node in ast.walk(ast.parse(source if source is not None else SETTINGS.read_text())):
        if not isinstance(node, ast.Call) or _reader(node) is None or not node.args:
            continue
        name = _literal(node.args[0])
        if not isinstance(name, str):
            continue
        reader = _reader(node) or ""
        doc = _literal(_keyword(node, "doc")) or ""
        shown = _literal(_keyword(node, "shown"))
        if shown is None or shown is ...:
            default = None if reader == "env_proxy_ssl_header" else _default(node)
            shown = "unset" if reader == "env_proxy_ssl_header" else _shown_or_computed(default)
        kind = READERS[reader]
        if reader == "env_choice" and len(node.args) > 2:
            kind = "one of " + ", ".join(f"`{c}`" for c in _literal(node.args[2]) or ())
        setting = Setting(name, kind, shown, doc if isinstance(doc, str) else "", node.lineno)
        if name not in found or (setting.doc and not found[name].doc):
            found[name] = setting
    return sorted(found.values(), key=lambda s: s.line)


def _default(call: ast.Call) -> Any:
    node = call.args[1] if len(call.args) > 1 else _keyword(call, "default")
    return _literal(node)


def _shown_or_computed(default: Any) -> str:
    return "computed (see `portal/settings.py`)" if default is ... else _shown(default)


def render(source: str | None = None) -> str:
    lines = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for item in declarations(source):
        lines.append(f"| `{item.name}` | {item.kind} | {item.default} | {item.doc} |")
    return "\n".join(lines)


def with_table(text: str, table: str) -> str:
    """`text` (README) with the part between the markers replaced by `table`."""
    head, found, rest = text.partition(BEGIN)
    _, found_end, tail = rest.partition(END)
    if not found or not found_end:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} markers")
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="README's settings table, from portal/settings.py")
    parser.add_argument("--write", action="store_true", help="rewrite README.md's table")
    args = parser.parse_args(argv)
    table = render()
    if args.write:
        README.write_text(with_table(README.read_text(), table))
    else:
        sys.stdout.write(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
