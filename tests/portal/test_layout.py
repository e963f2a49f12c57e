"""Every app laid out alike (docs/architecture.md, "Where a kind of code lives"): the map names
only places that exist; page views, page URLs and templates sit where the map says, under the
same names in every app; portal/urls.py includes each app's page URLs once. Read from the tree,
so a new `pages_*.py` or a second URL module fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("core", "tenants", "adapters", "workers", "budgets", "gateway", "evals", "portal")
# The page kit's own templates (tenants/pagekit.py renders domain errors as pages with them).
SHARED_TEMPLATES = {"portal/error.html", "portal/_error.html"}


def _map_section() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    start = text.index("## Where a kind of code lives")
    return text[start : text.index("\n## ", start + 1)]


def _app_modules() -> list[Path]:
    return [
        path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
    ]


def _page_modules(app: str) -> list[Path]:
    """An app's page views: pages.py or the modules of pages/, its sub-packages' too."""
    found = []
    for path in (ROOT / app).rglob("*.py"):
        inside = path.relative_to(ROOT / app).parts
        if path.name == "pages.py" or ("pages" in inside[:-1] and path.name != "__init__.py"):
            found.append(path)
    return found


def test_every_place_the_map_names_exists():
    named = set(re.findall(r"`([a-z_]+/[a-z_/.]*)`", _map_section()))
    named = {
        name for name in named if name.split("/")[0] in (*APPS, "templates", "static", "tests")
    }
    assert named, "the map names no places"
    assert {name for name in named if not (ROOT / name).exists()} == set()


def test_pages_urls_and_views_go_by_one_name_in_every_app():
    stray = [
        str(path.relative_to(ROOT))
        for path in _app_modules()
        if re.fullmatch(r"(.+_urls|pages_.+|.+_pages|page_.+|views_.+)\.py", path.name)
        and path.name != "page_selectors.py"
        and path.parent.name not in ("page_selectors", "templatetags")
    ]
    # A port (the map's "ports" row): what apps above add to the registry's pages.
    assert stray == ["adapters/page_panels.py"]


def test_portal_includes_each_apps_page_urls_once_and_no_app_includes_another():
    root_conf = (ROOT / "portal" / "urls.py").read_text()
    for app in APPS:
        conf = ROOT / app / "urls.py"
        if app == "portal" or not conf.exists():
            continue
        assert root_conf.count(f'include("{app}.urls")') == 1, app
        assert "include(" not in conf.read_text(), f"{app}/urls.py includes another URL module"
    stray = [
        str(path.relative_to(ROOT))
        for path in _app_modules()
        if path.name == "urls.py" and path.parent.name not in APPS and path.parent.name != "api"
    ]
    assert stray == [], "page URLs go in the app's own urls.py"


def test_a_pages_template_is_in_the_folder_of_the_app_whose_view_renders_it():
    misplaced = []
    for app in APPS:
        for path in _page_modules(app):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    name = node.value
                    if re.fullmatch(r"[a-z_]+/[a-z_/]+\.html", name) and not (
                        name.startswith(f"{app}/") or name in SHARED_TEMPLATES
                    ):
                        misplaced.append(f"{path.relative_to(ROOT)}: {name}")
    assert misplaced == []
