"""`lora-portal alias release`: a release plan started from the CLI, followed with --wait to its
end: exit 0 completed, 2 rolled back, 3 timeout; a refused plan exits 2 with the API's code."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from lora_portal_client import paths

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from evals.models import ReleasePlan
from evals.services.release_plans import plan_advance, plan_rollback
from tests.client.test_client_contract import missing_from_schema
from tests.gateway.test_releases import version

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_release_paths_are_in_the_openapi_schema():
    assert missing_from_schema(paths.RELEASE_PATHS) == []


@pytest.fixture
def bot(live_world):
    for number in (1, 2):
        version(live_world.support, number)
    alice = AccessContext.for_user(live_world.users["alice"])
    alias_set(
        access=alice,
        tenant=live_world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    return alice


def _started(cli, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lora_portal_client", "alias", "release", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.env("alice"),
        cwd=cli.home,
    )
    deadline = time.monotonic() + 60
    while not ReleasePlan.objects.filter(status="running").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the plan did not start"
        time.sleep(0.1)
    return proc


def test_a_plan_is_refused_or_followed_to_its_end_with_its_exit_code(cli, bot):
    refused = cli.json(
        "alias", "release", "acme/support-bot", "support@2", "--plan", "shadow,5,100", code=2
    )
    assert refused["error"]["code"] == "release.shadow_unavailable"
    assert not ReleasePlan.objects.exists()

    timed_out = cli("alias", "release", "acme/support-bot", "support@2", "--plan", "5,100",
                    "--wait", "--timeout", "1")  # fmt: skip
    assert timed_out.returncode == 3, timed_out.stderr
    assert "wait.timeout" in timed_out.stderr
    plan = ReleasePlan.objects.get()
    assert plan.steps == [5, 100]
    plan_rollback(access=bot, plan=plan, reason="again")

    proc = _started(cli, "acme/support-bot", "support@2", "--plan", "5,100", "--wait")
    plan_rollback(access=bot, plan=ReleasePlan.objects.get(status="running"), reason="bad")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert "rolled_back" in out and "release.rolled_back" in err

    proc = _started(cli, "acme/support-bot", "support@2", "--plan", "5,100", "--wait")
    plan_advance(access=bot, plan=ReleasePlan.objects.get(status="running"), reason="good")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (out, err)
    assert "completed" in out
