"""Numbers and records: usage, cost, the audit export and a version's compliance record."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import click

from lora_portal_client.cli_common import (
    emit,
    json_option,
    note,
    output_option,
    range_params,
    with_client,
)
from lora_portal_client.client import Client
from lora_portal_client.errors import ExitCode, PortalError
from lora_portal_client.refs import VersionRef

DAY = click.DateTime(formats=["%Y-%m-%d"])


def register(cli: click.Group) -> None:
    for command in (usage, cost, audit, evidence):
        cli.add_command(command)


@contextmanager
def _sink(output: Path | None) -> Iterator[BinaryIO]:
    """The -o file (written whole or not at all), else stdout."""
    if output is None:
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    partial = output.with_name(output.name + ".part")
    try:
        with open(partial, "wb") as stream:
            yield stream
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)


@click.command()
@click.option(
    "--tenant", help="One tenant (its owners); without it, every tenant (platform admins)."
)
@click.option("--from", "from_", type=DAY, help="First UTC day (default: first of the month).")
@click.option("--to", type=DAY, help="Last UTC day, included (default: today).")
@click.option("--csv", "as_csv", is_flag=True, help="CSV instead of a table.")
@json_option
@with_client
def usage(
    client: Client, tenant: str | None, from_: Any, to: Any, as_csv: bool, as_json: bool
) -> None:
    """Requests and tokens per day and version, for chargeback."""
    params = range_params(from_=from_ and from_.date().isoformat(), to=to and to.date().isoformat())
    response = client.usage(tenant=tenant, params=params, csv=as_csv and not as_json)
    if as_csv and not as_json:
        click.echo(response.text, nl=False)
        return
    body = response.json()

    def text() -> None:
        click.echo(f"usage {body.get('tenant') or 'all tenants'} {body['from']}..{body['to']}")
        for row in body.get("rows", []):
            click.echo("  " + "  ".join(f"{k}={v}" for k, v in row.items()))

    emit(as_json, body, text)


@click.command()
@click.option("--tenant")
@click.option("--from", "from_", help="Start (ISO date or time).")
@click.option("--to", help="End (ISO date or time).")
@json_option
@with_client
def cost(
    client: Client, tenant: str | None, from_: str | None, to: str | None, as_json: bool
) -> None:
    """Engine-hours and their cost against one dedicated endpoint per adapter, and each tenant's
    share."""
    body = client.cost(range_params(from_=from_, to=to, tenant=tenant))
    emit(as_json, body, lambda: click.echo(json.dumps(body, indent=2, default=str)))


@click.group()
def audit() -> None:
    """The audit log."""


@audit.command("export")
@click.option(
    "--format", "fmt", type=click.Choice(["csv", "jsonl"]), default="jsonl", show_default=True
)
@click.option("--tenant")
@click.option("--from", "from_", help="Start (ISO date or time).")
@click.option("--to", help="End (ISO date or time).")
@click.option("--action", help="Only this action, e.g. version.approve.")
@output_option
@json_option
@with_client
def audit_export(
    client: Client,
    fmt: str,
    tenant: str | None,
    from_: str | None,
    to: str | None,
    action: str | None,
    output: Path | None,
    as_json: bool,
) -> None:
    """Stream the audit log (CSV or JSON Lines) to a file or stdout, never whole in memory."""
    params = {"format": fmt, **range_params(tenant=tenant, from_=from_, to=to, action=action)}
    with _sink(output) as sink:
        written = client.audit_export_to(params, sink)
    if output is not None:
        emit(
            as_json,
            {"output": str(output), "bytes": written, "format": fmt},
            f"{written} bytes of {fmt} in {output}",
        )


@click.command()
@click.argument("target", metavar="TENANT/ADAPTER@N | verify")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@output_option
@json_option
def evidence(target: str, file: Path | None, output: Path | None, as_json: bool) -> None:
    """A version's compliance record (`evidence TENANT/ADAPTER@N [-o FILE]`, JSON as the portal
    sent it), or check a saved one offline (`evidence verify FILE`: exit 0 verified, 1 not)."""
    if target == "verify":
        if file is None:
            raise click.UsageError("Give the record to check: `evidence verify FILE`.")
        _verify(file, as_json)
        return
    if file is not None:
        raise click.UsageError("`evidence TENANT/ADAPTER@N` takes no FILE; use -o FILE.")
    ref = VersionRef.parse(target)
    with Client.from_environment() as client, _sink(output) as sink:
        written = client.evidence_to(ref, sink)
    if output is not None:
        note(f"{ref}: {written} bytes of evidence in {output}")


def _verify(file: Path, as_json: bool) -> None:
    if not file.is_file():
        raise click.UsageError(f"{file} is not a file.")
    try:
        from lora_portal_client.evidence import (  # type: ignore[import-not-found,unused-ignore]
            verify_file,
        )
    except ImportError:
        raise PortalError(
            "evidence.verifier_missing", "This client has no evidence verifier."
        ) from None
    problems = list(verify_file(file))
    emit(
        as_json,
        {"file": str(file), "ok": not problems, "problems": problems},
        lambda: click.echo(f"{file}: verified" if not problems else "\n".join(problems)),
    )
    if problems:
        raise click.exceptions.Exit(int(ExitCode.ERROR))
