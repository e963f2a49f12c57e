"""Runs a snippet in a process whose settings name another Redis database on the same server,
as another deployment (or another pytest-xdist worker) sharing the server would."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings
from redis.connection import parse_url

from tests.paths import REPO


def other_database_url() -> str:
    """This run's Redis server, a database no test worker, bench or `make run` uses."""
    ours = parse_url(settings.REDIS_URL).get("db", 0)
    other = 12 if ours != 12 else 11
    return settings.REDIS_URL.rpartition("/")[0] + f"/{other}"


def run_on_other_redis_database(code: str) -> str:
    """`code` after django.setup(), under tests.settings with REDIS_URL on the other database;
    returns what it printed."""
    env = dict(os.environ, REDIS_URL=other_database_url(), DJANGO_SETTINGS_MODULE="tests.settings")
    env["PORTAL_TEST_WORKER"] = env.get("PYTEST_XDIST_WORKER") or "gw0"  # REDIS_URL as given
    script = "import django\ndjango.setup()\n" + code
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
