"""The shipped alerting rules: promtool checks them and runs their unit tests, every alert has a
test, and every metric they read is one the portal exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from workers.metrics import fleet_registry
from workers.models import Engine, FleetAction

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "alerts"
RULES = ALERTS / "lora-portal-rules.yml"
RULE_TESTS = ALERTS / "lora-portal-rules.test.yml"


def promtool(*args: str, cwd: Path = ALERTS) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is missing: run scripts/ensure_promtool.sh (or `make promtool`)")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def alert_rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def test_promtool_checks_the_rules():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass():
    result = promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_unit_tests_catch_a_changed_threshold(tmp_path):
    rules = RULES.read_text()
    assert "> 10000" in rules
    (tmp_path / RULES.name).write_text(rules.replace("> 10000", "> 20000"))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    result = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "LoraPortalAdapterLoadLatencyHigh" in result.stdout + result.stderr


def test_every_alert_has_a_unit_test():
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {rule["alert"] for rule in alert_rules()} <= tested


def test_the_rules_read_metrics_the_portal_exports(world):
    engine = Engine.objects.create(
        name="e1",
        base_model=world.base,
        url="http://e1.internal:8000",
        served_model_name="tiny-base",
        adapter_root="/srv/adapters",
    )
    # The latency quantiles exist once there is a load to time.
    FleetAction.objects.create(engine=engine, kind="load", latency_ms=120.0)
    exported = {
        sample.name
        for family in text_string_to_metric_families(generate_latest(fleet_registry()).decode())
        for sample in family.samples
    }
    used = {
        name
        for rule in alert_rules()
        for name in re.findall(r"\b((?:adapter|lora_portal)_[a-z_]+)", rule["expr"])
    }
    assert used and used <= exported, used - exported
