"""The image carries every app and only what runs, checked in seconds without building it: the
files deploy/Containerfile copies (rebuilt in a temporary folder from its COPY lines) hold every
local app INSTALLED_APPS names and every local module the copied code imports or the settings
name by dotted path; every other package that code imports (or the settings name) is installed by
requirements.txt, the one file the image installs, never only by requirements-dev.txt; and
requirements.txt pins nothing the running portal does not need (its imports, its settings' dotted
paths and its entry point's servers, with their dependency trees).

The dependency trees come from this virtualenv's installed metadata (it installs both files), so
this needs no index and no build."""

from __future__ import annotations

import ast
import functools
import importlib.metadata as metadata
import importlib.util
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.test_containerfile import (
    CONTAINERFILE,
    _inside,
    _pip_requirement_files,
    materialise,
    parse,
)
from tests.paths import REPO

SETTINGS = REPO / "portal" / "settings.py"
REQUIREMENTS = REPO / "requirements.txt"
DEV_REQUIREMENTS = REPO / "requirements-dev.txt"
CLIENT = "lora-portal-client"
# What deploy/entrypoint.sh runs or what its servers load when installed, that no module imports:
# uvicorn and its standard extras (the HTTP parser, the event loop, WebSockets), celery's command,
# and psycopg's binary build and pool (settings' `pool` option).
RUNTIME_BY_NAME = {
    "uvicorn": "deploy/entrypoint.sh: web and gateway",
    "httptools": "uvicorn's HTTP parser",
    "uvloop": "uvicorn's event loop",
    "websockets": "uvicorn's WebSocket protocol (the live pages)",
    "celery": "deploy/entrypoint.sh: worker and beat",
    "psycopg-binary": "psycopg's C implementation",
    "psycopg-pool": "DATABASES' pool option (portal/settings.py)",
}
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def local_top_levels(context: Path = REPO) -> set[str]:
    """The project's own importable top-level names: its packages and root modules."""
    names = {p.parent.name for p in context.glob("*/__init__.py")}
    return names | {p.stem for p in context.glob("*.py")}


def _under_type_checking(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under `if TYPE_CHECKING:` (never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def imports(files: Iterable[Path]) -> Iterator[tuple[str, Path]]:
    """(top-level module, file) for every absolute import a file runs."""
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        skipped = _under_type_checking(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name.split(".")[0], path
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield node.module.split(".")[0], path


def settings_modules(path: Path = SETTINGS) -> set[str]:
    """The top-level modules the settings name, which Django imports by name: the apps, and the
    dotted paths (middleware, back ends, storages, channel layers)."""
    found = {label.split(".")[0] for label in settings.INSTALLED_APPS}
    for node in ast.walk(ast.parse(path.read_text())):
        text = node.value if isinstance(node, ast.Constant) else None
        if isinstance(text, str) and DOTTED.match(text):
            found.add(text.split(".")[0])
    return found


def requirement_names(path: Path) -> set[str]:
    """The canonical names a requirements file pins (its own lines, not nested files'); an
    editable local path counts as the project it installs."""
    names = set()
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith(("-r ", "-c ")):
            continue
        if line.startswith("-e ./client"):
            names.add(CLIENT)
        elif not line.startswith("-"):
            names.add(canonicalize_name(Requirement(line).name))
    return names


def dependency_closure(roots: Iterable[str]) -> set[str]:
    """`roots` and everything they require (no extras), from the installed metadata."""
    seen: set[str] = set()
    stack = [canonicalize_name(r) for r in roots]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.distribution(name).requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(canonicalize_name(req.name))
    return seen


@functools.cache
def _importable(top: str) -> bool:
    return importlib.util.find_spec(top) is not None


def _third_party(top: str, local: set[str]) -> bool:
    if top in local or top in sys.stdlib_module_names:
        return False
    return _importable(top)


@functools.cache
def _top_level_owners() -> dict[str, list[str]]:
    return dict(metadata.packages_distributions())


def _distributions(top: str) -> set[str]:
    return {canonicalize_name(d) for d in _top_level_owners().get(top, [])}


def image_problems(
    root: Path, app: Path, client: Path, runtime: set[str], local: set[str]
) -> list[str]:
    """What the copied tree at `root` (the code at `app`, the CLI's package at `client`) would
    miss at run time, given the distributions `runtime` installs (empty: nothing)."""
    problems = []
    copied = {p.parent.name for p in app.glob("*/__init__.py")} | {p.stem for p in app.glob("*.py")}
    for label in settings.INSTALLED_APPS:
        top = label.split(".")[0]
        if top in local and top not in copied:
            problems.append(f"INSTALLED_APPS names `{label}`, which the run stage does not copy")
    code = sorted(app.rglob("*.py")) + sorted(client.rglob("*.py"))
    used = list(imports(code)) + [(t, SETTINGS) for t in settings_modules()]
    for top, path in sorted(set(used)):
        where = path.relative_to(root) if path.is_relative_to(root) else path.relative_to(REPO)
        if top in local:
            if top not in copied:
                problems.append(f"{where} imports `{top}`, which the run stage does not copy")
        elif _third_party(top, local):
            names = _distributions(top)
            if not names & runtime:
                owner = ", ".join(sorted(names)) or "no installed distribution"
                problems.append(
                    f"{where} imports `{top}` ({owner}), which requirements.txt does not install"
                )
    return problems


def _runtime_distributions() -> set[str]:
    return dependency_closure(requirement_names(REQUIREMENTS))


@pytest.fixture(scope="module")
def copied_tree() -> Iterator[tuple[Path, Path, Path]]:
    """The run stage's files, with the CLI's package the build stage copies for its editable
    install: (root, the code's folder, the CLI's package)."""
    stages = parse(CONTAINERFILE.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for stage in stages:
            materialise(stage, root)
        run = stages[-1]
        yield root, _inside(root, run.workdir), root / "opt/venv/src/client/lora_portal_client"


def test_the_image_has_every_app_and_every_package_its_code_imports(copied_tree):
    root, app, client = copied_tree
    assert client.is_dir() and (app / "manage.py").is_file()
    problems = image_problems(root, app, client, _runtime_distributions(), local_top_levels())
    assert problems == []


def test_a_missing_app_is_caught():
    """The check on the recipe before `budgets/` and `evals/` were copied."""
    text = CONTAINERFILE.read_text()
    old = re.sub(r"COPY --chown=root:root (budgets|evals) \1\n", "", text)
    assert old != text
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stages = parse(old)
        for stage in stages:
            materialise(stage, root)
        app = _inside(root, stages[-1].workdir)
        client = root / "opt/venv/src/client/lora_portal_client"
        problems = image_problems(root, app, client, _runtime_distributions(), local_top_levels())
    assert "INSTALLED_APPS names `budgets`, which the run stage does not copy" in problems
    assert "INSTALLED_APPS names `evals`, which the run stage does not copy" in problems
    assert any("imports `evals`" in p for p in problems), problems


@pytest.mark.parametrize("module", ["pytest", "moto", "oauth2_provider", "aiosmtpd"])
def test_a_runtime_import_of_a_dev_only_package_is_caught(copied_tree, module):
    root, app, client = copied_tree
    added = app / "portal" / "dev_only_import.py"
    added.write_text(f"import {module}\n")
    try:
        problems = image_problems(root, app, client, _runtime_distributions(), local_top_levels())
    finally:
        added.unlink()
    assert any(f"portal/dev_only_import.py imports `{module}`" in p for p in problems), problems


def test_requirements_pin_only_what_runs(copied_tree):
    """Every pin in requirements.txt is needed by the running portal: something its code or
    settings import, its entry point runs, or a dependency of those."""
    root, app, client = copied_tree
    local = local_top_levels()
    code = sorted(app.rglob("*.py")) + sorted(client.rglob("*.py"))
    tops = {t for t, _ in imports(code)} | settings_modules()
    roots = {CLIENT, *RUNTIME_BY_NAME}
    for top in tops:
        if _third_party(top, local):
            roots |= _distributions(top)
    extra = requirement_names(REQUIREMENTS) - dependency_closure(roots)
    assert extra == set(), f"requirements.txt pins what nothing at run time needs: {extra}"


def test_the_dev_file_adds_the_test_tools_to_the_runtime_file():
    """`make test` installs requirements-dev.txt (scripts/ensure_venv.sh), which includes
    requirements.txt; the image installs requirements.txt alone, without the test tools."""
    assert "-r requirements.txt" in DEV_REQUIREMENTS.read_text().splitlines()
    assert "requirements-dev.txt" in (REPO / "scripts" / "ensure_venv.sh").read_text()
    runtime, dev = requirement_names(REQUIREMENTS), requirement_names(DEV_REQUIREMENTS)
    assert runtime.isdisjoint(dev)
    tools = {"pytest", "moto", "schemathesis", "playwright", "aiosmtpd", "django-oauth-toolkit"}
    assert tools <= dev
    installed = [f for s in parse(CONTAINERFILE.read_text()) for c, _ in s.runs for f in
                 _pip_requirement_files(c)]  # fmt: skip
    assert installed == ["requirements.txt"]
