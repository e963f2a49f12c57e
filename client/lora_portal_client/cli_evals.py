"""The eval gate: `eval suite push|list`, `eval run` (start one now), `eval wait` (follow it to
its verdict), `eval show` (a run's summary and the gate's verdict, optionally its cases as JSON
Lines), `eval override` (approve despite a failed gate)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from lora_portal_client.cli_common import (
    VERSION,
    emit,
    json_option,
    output_option,
    output_sink,
    version_line,
    with_client,
)
from lora_portal_client.client import Client
from lora_portal_client.errors import ExitCode, PortalError
from lora_portal_client.refs import VersionRef


def register(cli: click.Group) -> None:
    cli.add_command(eval_group)


@click.group("eval")
def eval_group() -> None:
    """Eval suites and the runs that gate a version's approval."""


@eval_group.group("suite")
def suite() -> None:
    """A tenant's eval suites (JSON Lines, one case a line)."""


def _suite_lines(suites: list[dict[str, Any]]) -> None:
    for found in suites:
        for version in found["versions"]:
            click.echo(
                f"{found['name']}@{version['number']}  {version['sha256'][:12]}  "
                f"{version['case_count']} cases ({version['must_pass_count']} must pass)"
            )


@suite.command("push")
@click.argument("tenant")
@click.argument("name")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@with_client
def suite_push(client: Client, tenant: str, name: str, file: Path, as_json: bool) -> None:
    """Upload FILE as a version of suite NAME; the same bytes again are the same version. A bad
    line refuses the whole file (exit 2) with each line's number and reason."""
    body = client.eval_suite_push(tenant, name, file)
    emit(as_json, body, lambda: _suite_lines([body]))


@suite.command("list")
@click.argument("tenant")
@json_option
@with_client
def suite_list(client: Client, tenant: str, as_json: bool) -> None:
    """Every suite of TENANT with its versions and their sha256."""
    suites = client.eval_suites(tenant)
    emit(as_json, suites, lambda: _suite_lines(suites))


def _latest(client: Client, ref: VersionRef) -> int:
    runs = client.eval_runs(ref)
    if not runs:
        raise PortalError(
            "eval_run.none", f"{ref} has no eval run yet.", exit_code=ExitCode.REFUSED
        )
    return max(int(run["id"]) for run in runs)


@eval_group.command("show")
@click.argument("ref", type=VERSION)
@click.option("--run", "run_id", type=int, help="This run (default: the latest).")
@click.option(
    "--cases", is_flag=True, help="Write the cases (JSON Lines) instead, to -o or stdout."
)
@output_option
@json_option
@with_client
def show(
    client: Client,
    ref: VersionRef,
    run_id: int | None,
    cases: bool,
    output: Path | None,
    as_json: bool,
) -> None:
    """A run of REF: status, progress, summary and the gate's verdict now. Exit 0 when the gate
    passes (or the adapter has none), 2 when it refuses, 1 while the run has not finished."""
    number = run_id or _latest(client, ref)
    if cases:
        with output_sink(output) as sink:
            client.eval_cases_to(ref, number, sink)
        return
    body = client.eval_run(ref, number)
    emit(as_json, body, lambda: _show_text(ref, body))
    gate = body.get("gate")
    if body["status"] != "finished":
        raise SystemExit(ExitCode.ERROR)
    if gate is not None and not gate["passed"]:
        raise SystemExit(ExitCode.REFUSED)


@eval_group.command("run")
@click.argument("ref", type=VERSION)
@json_option
@with_client
def run(client: Client, ref: VersionRef, as_json: bool) -> None:
    """Evaluate REF now on its adapter's policy suite (the run already queued or running, if
    any); `eval wait` follows it."""
    body = client.eval_run_start(ref)
    emit(as_json, body, lambda: click.echo(f"{ref} run {body['id']}: {body['status']}"))


@eval_group.command("wait")
@click.argument("ref", type=VERSION)
@click.option("--run", "run_id", type=int, help="This run (default: the latest).")
@click.option("--timeout", type=click.FloatRange(min=0), default=1800.0, show_default=True)
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True)
@json_option
@with_client
def wait(
    client: Client,
    ref: VersionRef,
    run_id: int | None,
    timeout: float,
    interval: float,
    as_json: bool,
) -> None:
    """Follow a run of REF to its end: exit 0 when the gate passes (or the adapter has none), 2
    when it refuses or the run failed, 3 when TIMEOUT seconds pass first (as `wait`)."""
    number = run_id or _latest(client, ref)
    deadline = time.monotonic() + timeout
    while True:
        body = client.eval_run(ref, number)
        if body["status"] in ("finished", "failed"):
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise PortalError(
                "wait.timeout",
                f"{ref} run {number} is still {body['status']} after {timeout:g} s "
                f"({body['progress']['done']}/{body['progress']['total']} cases).",
                exit_code=ExitCode.TIMEOUT,
                details={"version": str(ref), "run": number, "status": body["status"]},
            )
        time.sleep(min(interval, left))
    emit(as_json, body, lambda: _show_text(ref, body))
    gate = body.get("gate")
    if body["status"] == "failed" or (gate is not None and not gate["passed"]):
        raise SystemExit(ExitCode.REFUSED)


@eval_group.command("override")
@click.argument("ref", type=VERSION)
@click.option("--reason", required=True, help="Why approve despite the gate (audited).")
@click.option("--comment", default="", help="The approval's comment.")
@json_option
@with_client
def override(client: Client, ref: VersionRef, reason: str, comment: str, as_json: bool) -> None:
    """Approve REF despite a failed eval gate: a reviewer other than its uploader and the
    reviewer the gate refused first, with a written reason."""
    version = client.approve(ref, comment=comment, override_reason=reason)
    emit(as_json, version, version_line(version))


def _show_text(ref: VersionRef, body: dict[str, Any]) -> None:
    summary = body.get("summary") or {}
    progress = body["progress"]
    click.echo(
        f"{ref} run {body['id']}: {body['status']} ({progress['done']}/{progress['total']} cases) "
        f"against {body['baseline']}, suite {body['suite']}@{body['suite_version']} "
        f"{body['suite_sha256'][:12]}"
    )
    if body.get("error"):
        click.echo(f"  error: {body['error']}")
    passed, scored = summary.get("passed", {}), summary.get("scored", 0)
    click.echo(
        f"  pass: candidate {passed.get('candidate', 0)}/{scored}, "
        f"serving now {passed.get('baseline', 0)}/{scored}; "
        f"regressed: {', '.join(summary.get('regressed', [])) or 'none'}"
    )
    gate = body.get("gate")
    if gate is not None:
        click.echo(f"  gate: {'passes' if gate['passed'] else 'refuses approval'}")
        for criterion in gate["criteria"]:
            mark = "ok " if criterion["passed"] else "NO "
            click.echo(f"    {mark}{criterion['name']}: {criterion['message']}")
