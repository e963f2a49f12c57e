"""`alias set|promote|rollback|weights|show|release`: the names callers use, their canary weights,
and release plans judged on live quality."""

from __future__ import annotations

import time
from typing import Any

import click

from lora_portal_client.cli_common import ALIAS, emit, json_option, with_client
from lora_portal_client.client import Client
from lora_portal_client.errors import ExitCode, PortalError
from lora_portal_client.refs import AliasRef, parse_target


def register(cli: click.Group) -> None:
    cli.add_command(alias)


@click.group()
def alias() -> None:
    """Aliases: TENANT/ALIAS -> one or more active versions with weights."""


def _line(found: dict[str, Any]) -> str:
    targets = ", ".join(f"{t['version']}={t['weight']}" for t in found.get("targets", []))
    return f"{found['tenant']}/{found['name']} -> {targets}"


def _targets(values: tuple[str, ...]) -> list[dict[str, Any]]:
    if not values:
        raise click.UsageError("Give at least one ADAPTER@N=WEIGHT.")
    try:
        return [parse_target(v) for v in values]
    except Exception as exc:  # a PortalError from the parser: a usage error here
        raise click.UsageError(str(getattr(exc, "message", exc))) from None


def _targets_command(name: str, *, existing: bool, help: str) -> None:
    """`alias set` (create or replace) and `alias weights` (an existing alias, guard kept)."""

    @alias.command(name, help=help)
    @click.argument("ref", type=ALIAS)
    @click.argument("targets", nargs=-1, metavar="ADAPTER@N=WEIGHT...")
    @click.option("--reason", default="", help="Why, for the audit log.")
    @json_option
    @with_client
    def command(
        client: Client, ref: AliasRef, targets: tuple[str, ...], reason: str, as_json: bool
    ) -> None:
        guard = client.alias(ref).get("guard") if existing else None
        found = client.alias_set(ref, targets=_targets(targets), guard=guard, reason=reason)
        emit(as_json, found, _line(found))


_targets_command(
    "set",
    existing=False,
    help="Create the alias or replace its targets (weights add up to 100; 90 and 10 is a canary).",
)
_targets_command(
    "weights",
    existing=True,
    help="Change the weights of an existing alias, keeping its guard (404 if there is none).",
)


@alias.command("promote")
@click.argument("ref", type=ALIAS)
@click.argument("version", metavar="ADAPTER@N")
@click.option("--reason", default="", help="Why, for the audit log.")
@json_option
@with_client
def alias_promote(client: Client, ref: AliasRef, version: str, reason: str, as_json: bool) -> None:
    """Send 100% of the alias to one active version."""
    found = client.alias_promote(ref, version=version, reason=reason)
    emit(as_json, found, _line(found))


@alias.command("rollback")
@click.argument("ref", type=ALIAS)
@click.option("--reason", default="", help="Why, for the audit log.")
@json_option
@with_client
def alias_rollback(client: Client, ref: AliasRef, reason: str, as_json: bool) -> None:
    """Return the alias to the targets it had before its current revision."""
    found = client.alias_rollback(ref, reason=reason)
    emit(as_json, found, _line(found))


@alias.command("show")
@click.argument("ref", type=ALIAS)
@json_option
@with_client
def alias_show(client: Client, ref: AliasRef, as_json: bool) -> None:
    """The alias's targets and weights."""
    found = client.alias(ref)
    emit(as_json, found, _line(found))


def _plan_steps(value: str) -> list[int]:
    """`shadow,5,25,50,100` -> [0, 5, 25, 50, 100] (the portal says whether it takes them)."""
    steps = []
    for part in value.split(","):
        part = part.strip().lower()
        if part == "shadow":
            steps.append(0)
        elif part.isdigit():
            steps.append(int(part))
        else:
            raise click.UsageError(
                f"--plan takes weights and 'shadow', comma-separated; not {part!r}."
            )
    return steps


def _plan_line(plan: dict[str, Any]) -> str:
    step = plan["steps"][plan["current_step"]]
    return (
        f"release {plan['id']} of {plan['candidate']} (from {plan['stable']}): {plan['status']}, "
        f"step {plan['current_step']} ({step} %)"
        + (f": {plan['reason']}" if plan["reason"] else "")
    )


@alias.command("release")
@click.argument("ref", type=ALIAS)
@click.argument("version", metavar="ADAPTER@N")
@click.option(
    "--plan", "plan_steps", required=True, help="The candidate's weights, e.g. 5,25,50,100."
)
@click.option("--min-step-seconds", type=int, default=None, help="Each step's minimum time.")
@click.option("--min-step-samples", type=int, default=None, help="Each step's minimum sample.")
@click.option("--sample-share", type=float, default=None, help="Share of live answers sampled.")
@click.option("--wait", is_flag=True, help="Follow the plan: exit 0 completed, 2 rolled back.")
@click.option(
    "--timeout", type=float, default=3600.0, show_default=True, help="For --wait (exit 3)."
)
@json_option
@with_client
def alias_release(
    client: Client,
    ref: AliasRef,
    version: str,
    plan_steps: str,
    min_step_seconds: int | None,
    min_step_samples: int | None,
    sample_share: float | None,
    wait: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Release VERSION on the alias through a plan of steps judged on live quality."""
    body: dict[str, Any] = {"candidate": version, "steps": _plan_steps(plan_steps)}
    for key, value in (
        ("min_step_seconds", min_step_seconds),
        ("min_step_samples", min_step_samples),
        ("sample_share", sample_share),
    ):
        if value is not None:
            body[key] = value
    plan = client.release_start(ref, body)
    if wait:
        plan = _follow(client, ref, plan, timeout=timeout, quiet=as_json)
    emit(as_json, plan, _plan_line(plan))
    if plan["status"] == "rolled_back":
        raise PortalError(
            "release.rolled_back",
            f"{version} was rolled back on {ref}: {plan['reason']}",
            exit_code=ExitCode.REFUSED,
            details={"plan": plan["id"]},
        )


def _follow(
    client: Client, ref: AliasRef, plan: dict[str, Any], *, timeout: float, quiet: bool
) -> dict[str, Any]:
    """The plan once it has ended; PortalError (exit 3) when `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    seen = None
    while plan["status"] in ("running", "paused"):
        where = (plan["status"], plan["current_step"])
        if where != seen and not quiet:
            click.echo(_plan_line(plan), err=True)
        seen = where
        left = deadline - time.monotonic()
        if left <= 0:
            raise PortalError(
                "wait.timeout",
                f"Release {plan['id']} on {ref} is still {plan['status']} after {timeout:g} s.",
                exit_code=ExitCode.TIMEOUT,
                details={"plan": plan["id"], "status": plan["status"]},
            )
        time.sleep(min(2.0, left))
        plan = client.release_plan(ref, plan["id"])
    return plan
