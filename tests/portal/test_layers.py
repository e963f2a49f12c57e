"""Dependencies point one way (docs/architecture.md): core <- tenants <- adapters <- workers <-
budgets <- gateway <- evals <- portal. A lower layer never imports a higher one, lazily or not; the pure
packages (adapters/validation, workers/cache_policy, evals/scoring) use no Django and no app, and any layer may
use them; no two modules import each other, directly or round a circle. Read from the source,
so a new import that breaks the rule fails here."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = "portal"
BASE = "core"
APPS = ("tenants", "adapters", "workers", "budgets", "gateway", "evals")
ORDER = (BASE, *APPS, SITE)  # lowest first
PURE = ("adapters.validation", "workers.cache_policy", "evals.scoring", "gateway.class_policy")
# What "no Django" means for a pure package: the framework and what runs on it.
FRAMEWORK = (
    "django",
    "rest_framework",
    "drf_spectacular",
    "guardian",
    "celery",
    "django_celery_beat",
    "channels",
    "redis",
)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imported(path: Path, module: str) -> set[str]:
    """Every module name `path` imports, anywhere in it (inside functions too), with relative
    imports resolved and `from package import name` read as both the package and package.name."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def modules(packages: tuple[str, ...] = ORDER, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules it imports, for every module of `packages` (migrations left out:
    they are generated, and name app labels, not modules)."""
    out: dict[str, set[str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            module = _module_name(path, root)
            out[module] = _imported(path, module)
    return out


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def pure_package_of(module: str) -> str | None:
    return next((p for p in PURE if _within(module, p)), None)


def upward_imports(found: dict[str, set[str]], lower: str, higher: str) -> list[str]:
    """Modules of layer `lower` (its pure package aside) that import layer `higher` (its pure
    package aside: a library any layer may use)."""
    return sorted(
        f"{module} -> {name}"
        for module, names in found.items()
        if _within(module, lower) and pure_package_of(module) is None
        for name in names
        if _within(name, higher) and pure_package_of(name) is None
    )


def impure_imports(found: dict[str, set[str]], package: str) -> list[str]:
    """What a pure package imports beyond itself and the standard and numeric libraries: any
    project package (even the app that holds it) or the framework."""
    return sorted(
        f"{module} -> {name}"
        for module, names in found.items()
        if _within(module, package)
        for name in names
        if not _within(name, package)
        and (name.split(".")[0] in ORDER or name.split(".")[0] in FRAMEWORK)
    )


def circles(found: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other round a circle (strongly connected, > 1)."""
    graph = {m: {n for n in names if n in found and n != m} for m, names in found.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's; the graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


FOUND = modules()


# --- the order ---


@pytest.mark.parametrize(
    ("lower", "higher"),
    list(itertools.combinations(ORDER, 2)),
    ids=[f"{lo}-does-not-import-{hi}" for lo, hi in itertools.combinations(ORDER, 2)],
)
def test_no_layer_imports_a_higher_one(lower, higher):
    assert upward_imports(FOUND, lower, higher) == []


def test_the_base_imports_no_app_and_not_the_site():
    wrong = sorted(
        f"{module} -> {name}"
        for module, names in FOUND.items()
        if _within(module, BASE)
        for name in names
        if name.split(".")[0] in {SITE, *APPS}
    )
    assert wrong == []


@pytest.mark.parametrize("package", PURE)
def test_the_pure_packages_import_no_django_and_no_app(package):
    assert any(_within(m, package) for m in FOUND)  # the package is there to be checked
    assert impure_imports(FOUND, package) == []


def test_no_modules_import_each_other_round_a_circle():
    assert circles(FOUND) == []


# --- each check can fail ---


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    packages = tuple(sorted({name.split("/")[0] for name in files}))
    return modules(packages, tmp_path)


def test_the_order_sees_imports_inside_functions(tmp_path):
    """A lazy import is an import: tenants asking the registry inside a method is caught."""
    found = _tree(
        tmp_path,
        {
            "tenants/access.py": "def f():\n    from adapters.models import Adapter\n",
            "adapters/models.py": "",
        },
    )
    assert upward_imports(found, "tenants", "adapters") == [
        "tenants.access -> adapters.models",
        "tenants.access -> adapters.models.Adapter",
    ]


def test_the_order_sees_a_package_imported_by_its_parent(tmp_path):
    found = _tree(tmp_path, {"adapters/services/x.py": "from workers import schedules\n"})
    assert upward_imports(found, "adapters", "workers") == [
        "adapters.services.x -> workers",
        "adapters.services.x -> workers.schedules",
    ]


def test_the_order_lets_any_layer_use_a_pure_package(tmp_path):
    """tenants may use adapters/validation (a library); not the rest of adapters."""
    found = _tree(
        tmp_path,
        {
            "tenants/keys.py": "from adapters.validation.signatures import key_fingerprint\n",
            "tenants/other.py": "from adapters import selectors\n",
        },
    )
    assert upward_imports(found, "tenants", "adapters") == [
        "tenants.other -> adapters",
        "tenants.other -> adapters.selectors",
    ]


def test_a_pure_package_may_not_use_django(tmp_path):
    found = _tree(
        tmp_path,
        {
            "workers/cache_policy/__init__.py": "",
            "workers/cache_policy/score.py": "def f():\n    from django.conf import settings\n",
            "workers/cache_policy/rules.py": "import math\nfrom .score import f\n",
        },
    )
    assert impure_imports(found, "workers.cache_policy") == [
        "workers.cache_policy.score -> django.conf",
        "workers.cache_policy.score -> django.conf.settings",
    ]


def test_a_pure_package_may_not_use_an_app_not_even_its_own(tmp_path):
    found = _tree(
        tmp_path,
        {
            "adapters/validation/__init__.py": "",
            "adapters/validation/report.py": "from adapters.models import AdapterVersion\n",
            "adapters/validation/codes.py": "from core.errors import ApplicationError\n",
        },
    )
    assert impure_imports(found, "adapters.validation") == [
        "adapters.validation.codes -> core.errors",
        "adapters.validation.codes -> core.errors.ApplicationError",
        "adapters.validation.report -> adapters.models",
        "adapters.validation.report -> adapters.models.AdapterVersion",
    ]


def test_a_circle_is_found_through_lazy_and_relative_imports(tmp_path):
    """uploads -> tasks -> direct_uploads -> uploads, as the registry once had it."""
    found = _tree(
        tmp_path,
        {
            "adapters/__init__.py": "",
            "adapters/services/__init__.py": "",
            "adapters/services/uploads.py": "def f():\n    from adapters.tasks import v\n",
            "adapters/tasks.py": "def g():\n    from adapters.services import direct_uploads\n",
            "adapters/services/direct_uploads.py": "from .uploads import f\n",
            "adapters/services/lifecycle.py": "from adapters.services import uploads\n",
        },
    )
    assert circles(found) == [
        ["adapters.services.direct_uploads", "adapters.services.uploads", "adapters.tasks"]
    ]


def test_a_chain_without_a_circle_is_not_one(tmp_path):
    found = _tree(
        tmp_path,
        {
            "workers/desired.py": "",
            "workers/controller.py": "from workers.desired import f\n",
            "workers/tasks.py": "from workers.controller import g\nfrom workers import desired\n",
        },
    )
    assert circles(found) == []
