"""`alias release` and `alias plan ...` against a served portal: a plan started with `--wait`
prints each decision as the portal records it and exits 0 when it completes, 2 when it is rolled
back (by the controller or a person), 3 when `--timeout` runs out; the plan's show, pause, resume,
advance and rollback; refusals keep the API's codes (another tenant's alias is a 404)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from lora_portal_client import paths
from lora_portal_client.cli_releases import parse_plan

from adapters.access import AccessContext
from adapters.services.aliases import alias_set
from evals.models import ReleasePlan, ReleaseStep
from evals.services import release_controller
from tests.client.conftest import issue_token
from tests.client.test_client_contract import missing_from_schema
from tests.evals.live_policy import live_checks_policy
from tests.gateway.test_releases import version

ALIAS = "acme/support-bot"


def test_the_release_paths_are_in_the_schema():
    assert missing_from_schema(paths.RELEASE_PATHS) == []


def test_a_plan_reads_shadow_as_a_step_no_caller_sees():
    assert parse_plan("shadow,5,25,50,100") == [0, 5, 25, 50, 100]
    assert parse_plan("5%, 100") == [5, 100]


@pytest.fixture
def bot(cli, live_world):
    """support@1 and @2 active, the alias support-bot on support@1, live checks on support."""
    world = live_world
    cli.tokens["vera"] = issue_token(world, "vera", ["read", "write"])  # acme's viewer
    for number in (1, 2):
        version(world.support, number)
    alias_set(
        access=AccessContext.for_user(world.users["alice"]),
        tenant=world.acme,
        name="support-bot",
        targets=[{"version": "support@1", "weight": 100}],
    )
    live_checks_policy(
        tenant=world.acme, adapter=world.support, checks={"not_contains": ["BANNED"]}
    )
    return world


def start_waiting(cli: Any, *extra: str, who: str = "bob") -> subprocess.Popen[str]:
    """`alias release ... --wait` as a running process, once its plan exists."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lora_portal_client",
            "alias",
            "release",
            ALIAS,
            "support@2",
            "--plan",
            "5,50,100",
            "--min-step-seconds",
            "0",
            "--min-step-samples",
            "20",
            "--wait",
            "--interval",
            "0.2",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.env(who),
        cwd=cli.home,
    )
    deadline = time.monotonic() + 120
    while not ReleasePlan.objects.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the plan was never started"
        time.sleep(0.1)
    return process


def judged(plan: ReleasePlan, *, stable: tuple[int, int], candidate: tuple[int, int]) -> str:
    """The step's sampled counts, then one pass of the controller the beat runs."""
    plan.refresh_from_db()
    ReleaseStep.objects.filter(plan=plan, index=plan.current_step).update(
        stable_n=stable[0],
        stable_passed=stable[1],
        candidate_n=candidate[0],
        candidate_passed=candidate[1],
    )
    return release_controller.plan_tick(plan.pk, client=None, now=time.time()).decision


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def test_wait_prints_each_decision_and_exits_0_when_the_plan_completes(cli, bot):
    process = start_waiting(cli)
    plan = ReleasePlan.objects.get()
    assert judged(plan, stable=(200, 200), candidate=(200, 200)) == "advance"
    assert judged(plan, stable=(200, 200), candidate=(200, 199)) == "complete"
    code, out, err = finished(process)
    assert code == 0, (out, err)
    assert f"plan {plan.pk} on support-bot: support@1 -> support@2 [5%, 50%, 100%] completed" in out
    lines = [line for line in err.splitlines() if line.startswith(f"plan {plan.pk} step")]
    assert [line.split(": ")[1].split(" (")[0] for line in lines] == [
        "advance by controller",
        "complete by controller",
    ], err
    assert "live_checks advance" in lines[0] and "[" in lines[0]  # estimate and interval


def test_wait_exits_2_when_the_controller_rolls_the_plan_back(cli, bot):
    process = start_waiting(cli, "--json")
    plan = ReleasePlan.objects.get()
    assert judged(plan, stable=(200, 200), candidate=(200, 120)) == "rollback"
    code, out, err = finished(process)
    assert code == 2, (out, err)
    shown = json.loads(out)
    assert (shown["status"], shown["decisions"][-1]["action"]) == ("rolled_back", "rollback")
    assert "passes less often" in shown["reason"]


def test_wait_exits_2_when_a_person_rolls_back_and_3_on_timeout(cli, bot):
    process = start_waiting(cli)
    done = cli("alias", "plan", "rollback", ALIAS, "--reason", "customers complain", who="alice")
    assert done.returncode == 0, done.stderr
    code, out, err = finished(process)
    assert code == 2, (out, err)
    assert "rollback by alice" in err and "rolled back: customers complain" in err
    # A plan that does not move within --timeout: exit 3, and the plan goes on.
    error = cli.json(
        "alias", "release", ALIAS, "support@2", "--plan", "5,100", "--wait", "--timeout", "0.5",
        code=3,
    )  # fmt: skip
    assert error["error"]["code"] == "release.wait_timeout"
    assert ReleasePlan.objects.get(pk=error["error"]["details"]["plan"]).status == "running"


def test_show_pause_resume_and_advance_the_newest_plan(cli, bot):
    started = cli.json("alias", "release", ALIAS, "support@2", "--plan", "5,50,100", who="bob")
    assert (started["status"], started["current_step"]) == ("running", 0)
    assert cli.json("alias", "plan", "pause", ALIAS, who="bob")["status"] == "paused"
    assert cli.json("alias", "plan", "resume", ALIAS, who="bob")["status"] == "running"
    advanced = cli.json("alias", "plan", "advance", ALIAS, "--reason", "looks fine", who="bob")
    assert advanced["current_step"] == 1
    shown = cli("alias", "plan", "show", ALIAS, "--id", str(started["id"]), who="vera")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "running at step 1" in text and "> step 1    50%" in text, text
    assert [line.split(": ")[1].split(" (")[0] for line in text.splitlines()[4:]] == [
        "pause by bob",
        "resume by bob",
        "advance by bob",
    ], text


def test_refusals_keep_the_apis_codes_and_leave_nothing(cli, bot):
    # A shadow step goes to the portal as 0; the portal's refusal, if it has no shadow pairs,
    # comes back with its code (exit 2) and no plan is left behind.
    shadow = cli("alias", "release", ALIAS, "support@2", "--plan", "shadow,5,100", "--json")
    if shadow.returncode != 0:
        assert shadow.returncode == 2, shadow.stdout
        assert json.loads(shadow.stdout)["error"]["code"].startswith("release.")
        assert not ReleasePlan.objects.exists()
    else:
        assert json.loads(shadow.stdout)["steps"] == [0, 5, 100]
        ReleasePlan.objects.all().delete()
    assert cli("alias", "release", ALIAS, "support@2", "--plan", "5,x").returncode == 4
    assert cli.json("alias", "plan", "show", ALIAS, code=2)["error"]["code"] == "release.no_plan"
    cli.json("alias", "release", ALIAS, "support@2", "--plan", "5,100")
    # The viewer may read the plan but not act on it; another tenant finds no alias.
    assert cli.json("alias", "plan", "pause", ALIAS, who="vera", code=2)["error"]["status"] == 403
    assert cli.json("alias", "plan", "show", ALIAS, who="charlie", code=2)["error"]["status"] == 404
    assert ReleasePlan.objects.get().status == "running"
