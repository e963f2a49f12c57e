"""`alias release` and `alias plan show|pause|resume|advance|rollback`: a version released on an
alias through a plan of steps the portal's controller judges on live answers (docs/releases.md).

`alias release --wait` follows the plan, printing each decision as the portal records it, and
exits 0 when the plan completes, 2 when it is rolled back, 3 when `--timeout` runs out first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from lora_portal_client.cli_common import ALIAS, emit, json_option, note, with_client
from lora_portal_client.client import Client
from lora_portal_client.errors import ExitCode, PortalError
from lora_portal_client.refs import AliasRef

SHADOW = "shadow"  # a step where callers see only the stable (weight 0)
FINISHED = {"completed": ExitCode.OK, "rolled_back": ExitCode.REFUSED}


def parse_plan(value: str) -> list[int]:
    """`shadow,5,25,50,100` -> [0, 5, 25, 50, 100]; the portal checks the rest."""
    steps: list[int] = []
    for part in (p.strip() for p in value.split(",")):
        if part.lower() == SHADOW:
            steps.append(0)
            continue
        try:
            steps.append(int(part.rstrip("%")))
        except ValueError:
            raise click.UsageError(
                f"--plan: '{part}' is neither 'shadow' nor a whole percentage "
                "(e.g. --plan shadow,5,25,50,100)."
            ) from None
    return steps


def plan_line(plan: dict[str, Any]) -> str:
    steps = ", ".join(f"{w}%" if w else SHADOW for w in plan.get("steps", []))
    return (
        f"plan {plan['id']} on {plan['alias']}: {plan['stable']} -> {plan['candidate']} "
        f"[{steps}] {plan['status']} at step {plan['current_step']}"
    )


def decision_line(plan: dict[str, Any], decision: dict[str, Any]) -> str:
    who = "controller" if decision.get("automatic") else decision.get("actor", "")
    figures = []
    for name, guard in sorted((decision.get("numbers") or {}).get("guards", {}).items()):
        low, high = (guard.get("interval") or [None, None])[:2]
        interval = f" [{low:+.3f}, {high:+.3f}]" if low is not None and high is not None else ""
        estimate = guard.get("estimate")
        shown = f" {estimate:+.3f}" if isinstance(estimate, int | float) else ""
        figures.append(f"{name} {guard.get('decision', '?')}{shown}{interval}")
    guards = f" ({'; '.join(figures)})" if figures else ""
    return (
        f"plan {plan['id']} step {decision['step']}: {decision['action']} by {who}"
        f"{guards}: {decision.get('reason', '')}"
    )


def follow_plan(
    client: Client,
    ref: AliasRef,
    plan_id: int,
    *,
    timeout: float,
    interval: float,
    on_decision: Callable[[dict[str, Any], dict[str, Any]], None],
    seen: int = 0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """The plan once it has completed or been rolled back, reporting every decision after the
    first `seen` once; PortalError (exit 3) when `timeout` seconds pass first."""
    deadline = clock() + timeout
    while True:
        plan = client.release_plan(ref, plan_id)
        decisions = plan.get("decisions", [])
        for decision in decisions[seen:]:
            on_decision(plan, decision)
        seen = len(decisions)
        if plan["status"] in FINISHED:
            return plan
        left = deadline - clock()
        if left <= 0:
            raise PortalError(
                "release.wait_timeout",
                f"Plan {plan_id} on {ref} is still {plan['status']} at step "
                f"{plan['current_step']} after {timeout:g} s; it goes on without you "
                f"(`lora-portal alias plan show {ref}`).",
                exit_code=ExitCode.TIMEOUT,
                details={"plan": plan_id, "status": plan["status"], "step": plan["current_step"]},
            )
        sleep(min(interval, left))


def register(alias: click.Group) -> None:
    alias.add_command(release)
    alias.add_command(plan)


@click.command("release")
@click.argument("ref", type=ALIAS)
@click.argument("candidate", metavar="ADAPTER@N")
@click.option(
    "--plan",
    "steps",
    default="5,25,50,100",
    show_default=True,
    help="The candidate's weight at each step; 'shadow' is a step no caller sees it.",
)
@click.option("--min-step-seconds", type=click.IntRange(min=0), help="Each step lasts at least.")
@click.option("--min-step-samples", type=click.IntRange(min=10), help="Sampled answers per step.")
@click.option("--sample-share", type=click.FloatRange(0.001, 1), help="Share of answers sampled.")
@click.option("--alpha", type=click.FloatRange(0.0001, 0.49), help="The guards' error rate.")
@click.option("--margin", type=click.FloatRange(0, 0.99), help="How much worse may advance.")
@click.option("--wait", is_flag=True, help="Follow the plan until it completes or rolls back.")
@click.option("--timeout", type=click.FloatRange(min=0), default=3600.0, show_default=True)
@click.option("--interval", type=click.FloatRange(min=0.1), default=5.0, show_default=True)
@json_option
@with_client
def release(
    client: Client,
    ref: AliasRef,
    candidate: str,
    steps: str,
    min_step_seconds: int | None,
    min_step_samples: int | None,
    sample_share: float | None,
    alpha: float | None,
    margin: float | None,
    wait: bool,
    timeout: float,
    interval: float,
    as_json: bool,
) -> int:
    """Start a release plan for ADAPTER@N (active) on the alias TENANT/ALIAS.

    With --wait: exit 0 when it completes, 2 when it is rolled back, 3 on --timeout."""
    body: dict[str, Any] = {"candidate": candidate, "steps": parse_plan(steps)}
    for key, value in (
        ("min_step_seconds", min_step_seconds),
        ("min_step_samples", min_step_samples),
        ("sample_share", sample_share),
        ("alpha", alpha),
        ("margin", margin),
    ):
        if value is not None:
            body[key] = value
    started = client.release_plan_start(ref, body)
    if not wait:
        emit(as_json, started, plan_line(started))
        return ExitCode.OK
    if not as_json:
        note(plan_line(started))

    def report(found: dict[str, Any], decision: dict[str, Any]) -> None:
        if not as_json:
            note(decision_line(found, decision))

    done = follow_plan(
        client, ref, int(started["id"]), timeout=timeout, interval=interval, on_decision=report
    )
    emit(as_json, done, plan_line(done))
    if done["status"] == "rolled_back" and not as_json:
        note(f"rolled back: {done.get('reason', '')}")
    return FINISHED[done["status"]]


@click.group("plan")
def plan() -> None:
    """An alias's release plan: show it, pause, resume, advance or roll it back."""


def _plan_id(client: Client, ref: AliasRef, given: int | None) -> int:
    if given is not None:
        return given
    newest = client.release_plan_newest(ref)
    if newest is None:
        raise PortalError(
            "release.no_plan",
            f"{ref} has no release plan; start one with `lora-portal alias release`.",
            exit_code=ExitCode.REFUSED,
            status=404,
        )
    return int(newest["id"])


def _show_text(found: dict[str, Any]) -> Callable[[], None]:
    def show() -> None:
        click.echo(plan_line(found))
        for step in found.get("step_rows", []):
            samples = step.get("samples", {})
            sides = " ".join(
                f"{side} {samples.get(side, {}).get('passed', 0)}/{samples.get(side, {}).get('n', 0)}"
                for side in ("stable", "candidate")
            )
            guards = ", ".join(
                f"{name} {g.get('decision', '?')}" for name, g in sorted(step["guards"].items())
            )
            mark = ">" if step["index"] == found["current_step"] else " "
            weight = f"{step['weight']}%" if step["weight"] else SHADOW
            shadow = step.get("shadow")
            pairs = (
                f"  pairs {shadow.get('pairs_n', 0)} skipped {shadow.get('skipped_n', 0)}"
                if shadow
                else ""
            )
            click.echo(
                f"{mark} step {step['index']} {weight:>6} {step.get('outcome') or '-':<11} "
                f"{sides}  {guards}{pairs}"
            )
        for decision in found.get("decisions", []):
            click.echo("  " + decision_line(found, decision))

    return show


@plan.command("show")
@click.argument("ref", type=ALIAS)
@click.option("--id", "plan_id", type=int, help="Which plan (default: the newest).")
@json_option
@with_client
def plan_show(client: Client, ref: AliasRef, plan_id: int | None, as_json: bool) -> None:
    """The plan's steps with their samples and guards, and every decision."""
    found = client.release_plan(ref, _plan_id(client, ref, plan_id))
    emit(as_json, found, _show_text(found))


def _action_command(action: str, help: str) -> None:
    @plan.command(action, help=help)
    @click.argument("ref", type=ALIAS)
    @click.option("--id", "plan_id", type=int, help="Which plan (default: the newest).")
    @click.option("--reason", default="", help="Why, for the audit log.")
    @json_option
    @with_client
    def command(
        client: Client, ref: AliasRef, plan_id: int | None, reason: str, as_json: bool
    ) -> None:
        found = client.release_plan_act(ref, _plan_id(client, ref, plan_id), action, reason=reason)
        emit(as_json, found, plan_line(found))


_action_command("pause", "Stop the controller moving the plan (weights stay as they are).")
_action_command("resume", "Let the controller move the plan again.")
_action_command("advance", "Move to the next step now, whatever the guards say (recorded).")
_action_command("rollback", "End the plan with the stable version alone at 100 %.")
