"""The budgets' test clock (BUDGET_CLOCK_OFFSET_FILE): the production settings refuse it, the test
settings take it, and the clock moves by what the file says."""

from __future__ import annotations

import os
import subprocess
import sys

from budgets import clock
from tests.fixtures.celery_worker import REPO

SHOW = "from django.conf import settings; import django; django.setup(); "


def _settings_process(module: str, clock_file: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": module, "BUDGET_CLOCK_OFFSET_FILE": clock_file}
    return subprocess.run(
        [sys.executable, "-c", SHOW + "print(settings.BUDGET_CLOCK_OFFSET_FILE)"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_production_settings_refuse_a_clock_file(tmp_path):
    clock_file = str(tmp_path / "clock")
    refused = _settings_process("portal.settings", clock_file)
    assert refused.returncode != 0
    assert "BUDGET_CLOCK_OFFSET_FILE" in refused.stderr and "tests.settings" in refused.stderr
    taken = _settings_process("tests.settings", clock_file)
    assert taken.returncode == 0, taken.stderr
    assert taken.stdout.strip() == clock_file


def test_the_clock_moves_by_the_files_offset(settings, tmp_path):
    clock_file = tmp_path / "clock"
    settings.BUDGET_CLOCK_OFFSET_FILE = str(clock_file)
    assert abs(clock.offset_s()) == 0.0  # no file yet: the system clock
    clock_file.write_text("86400")
    real = clock.time.time()
    assert 86400 <= clock.timestamp() - real < 86400 + 5
