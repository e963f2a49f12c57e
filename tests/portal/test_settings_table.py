"""Every setting read from the environment is declared once, where portal/settings.py reads it
(name, type, default, `doc`), README's table is generated from those declarations, and no other
module of the portal reads the environment itself."""

from __future__ import annotations

import ast
from pathlib import Path

from portal.settings_table import README, declarations, render, with_table

ROOT = Path(__file__).resolve().parents[2]
# The portal's apps; the CLI (client/), the engine's plugin (engine/) and the benchmarks are
# programs of their own with their own options.
APPS = ("core", "tenants", "adapters", "workers", "budgets", "gateway", "evals", "portal")
READS_HERE = {ROOT / "portal" / "env.py", ROOT / "portal" / "settings.py"}
# Reads whose variable a declared setting names: a provider's client secret, from the variable
# its OIDC_PROVIDERS entry names (`client_secret_env`), read where it is used.
NAMED_BY_A_SETTING = {ROOT / "tenants" / "sso" / "providers.py"}


def environment_reads(root: Path = ROOT) -> list[str]:
    """`path:line` of every os.environ / os.getenv read in the apps outside env.py and
    settings.py (setting DJANGO_SETTINGS_MODULE for a process is not a read)."""
    found = []
    for package in APPS:
        for path in sorted((root / package).rglob("*.py")):
            if path in READS_HERE | NAMED_BY_A_SETTING or "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv"}):
                    continue
                line = path.read_text().splitlines()[node.lineno - 1]
                if 'setdefault("DJANGO_SETTINGS_MODULE"' in line:
                    continue
                found.append(f"{path.relative_to(root)}:{node.lineno}: {line.strip()}")
    return found


def test_every_setting_says_what_it_does():
    settings = declarations()
    assert len(settings) > 90
    assert [s.name for s in settings if not s.doc.strip()] == []


def test_a_setting_read_without_its_doc_is_named():
    source = (ROOT / "portal" / "settings.py").read_text()
    added = source + '\nNEW_ONE = env_int("NEW_ONE", 3)\n'
    undocumented = [s.name for s in declarations(added) if not s.doc]
    assert undocumented == ["NEW_ONE"]
    documented = declarations(source + '\nNEW_TWO = env_float("NEW_TWO", 2.0, doc="two")\n')
    assert (documented[-1].name, documented[-1].kind, documented[-1].default) == (
        "NEW_TWO",
        "number",
        "`2`",
    )


def test_readme_shows_the_generated_table():
    text = README.read_text()
    assert with_table(text, render()) == text, (
        "README's settings table is stale: run `python -m portal.settings_table --write`"
    )


def test_no_module_of_the_portal_reads_the_environment_itself():
    assert environment_reads() == []


def test_a_direct_read_is_found(tmp_path):
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "app.py").write_text('import os\nX = os.environ.get("X")\n')
    assert environment_reads(tmp_path) == ['gateway/app.py:2: X = os.environ.get("X")']
