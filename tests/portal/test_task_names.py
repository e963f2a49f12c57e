"""Tasks are found by name: beat entries name them, queued messages carry the name, and services
below a task module start it by name (core.tasks.task_named, docs/architecture.md). A task that
moves module must keep its name; these fail when a name no longer leads to a task."""

from __future__ import annotations

import ast
from pathlib import Path

from django.conf import settings

from portal.celery import app
from tenants import access_port

ROOT = Path(__file__).resolve().parents[2]
APPS = ("core", "tenants", "adapters", "workers", "gateway", "evals", "portal")


def registered() -> set[str]:
    app.autodiscover_tasks(force=True)  # what a worker does when it starts
    return set(app.tasks)


def names_started_by_name(root: Path = ROOT) -> set[str]:
    """The literal names passed to task_named(...) anywhere in the apps."""
    found: set[str] = set()
    for package in APPS:
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", getattr(node.func, "attr", "")) == "task_named"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    found.add(node.args[0].value)
    return found


def test_every_beat_entry_names_a_registered_task():
    names = {str(entry["task"]) for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "gateway.tasks.check_canaries" in names  # named after the module that holds it
    assert sorted(names - registered()) == []


def test_every_task_started_by_name_is_registered():
    names = names_started_by_name()
    assert {
        "adapters.tasks.validate_version",
        "workers.tasks.converge_engine_task",
        "workers.tasks.stage_version_task",
    } <= names
    assert sorted(names - registered()) == []


def test_a_name_that_leads_nowhere_is_caught(tmp_path):
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "desired.py").write_text(
        "def f():\n    task_named('workers.tasks.gone')\n"
    )
    names = names_started_by_name(tmp_path)
    assert sorted(names - registered()) == ["workers.tasks.gone"]


def test_the_ports_are_connected_once_the_apps_are_ready():
    """tenants asks the access rules, the registry asks the fleet, /metrics scrapes the gateway's
    collector: each connected by the higher app's AppConfig.ready()."""
    from adapters import fleet_port
    from adapters.access import AccessContext
    from gateway.metrics import GatewayCollector
    from workers import registry_answers
    from workers.metrics import _collectors_above

    assert access_port._rules is AccessContext
    assert fleet_port.fleet() is registry_answers
    assert _collectors_above == [GatewayCollector]
