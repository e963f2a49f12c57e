"""Dependencies point one way: the shared base (core/) imports no app and not the site; the apps
import the base and each other, never the site (portal/: settings, URLs, ASGI, Celery, the web
shell). Read from the source, so a new import that breaks the rule fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = "portal"
BASE = "core"
APPS = ("tenants", "adapters", "workers", "gateway")


def imports_of(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Top-level project packages each module of `package` imports (migrations left out: they
    are generated, and name app labels, not modules)."""
    out: dict[str, set[str]] = {}
    for path in sorted((root / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
        out[str(path.relative_to(root))] = found & {SITE, BASE, *APPS}
    return out


def test_the_base_imports_no_app_and_not_the_site():
    wrong = {m: sorted(i - {BASE}) for m, i in imports_of(BASE).items() if i - {BASE}}
    assert wrong == {}


@pytest.mark.parametrize("app", APPS)
def test_no_app_imports_the_site(app):
    wrong = sorted(m for m, i in imports_of(app).items() if SITE in i)
    assert wrong == []


def test_the_rule_sees_imports_inside_functions(tmp_path):
    """The check must be able to fail: a lazy import is an import."""
    (tmp_path / BASE).mkdir()
    (tmp_path / BASE / "lazy.py").write_text("def f():\n    from portal.settings import DEBUG\n")
    assert imports_of(BASE, tmp_path) == {f"{BASE}/lazy.py": {SITE}}
