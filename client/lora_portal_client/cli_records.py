"""Numbers and records: usage, cost, the audit export and a version's compliance record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from lora_portal_client.cli_common import (
    client_from_environment,
    emit,
    json_option,
    note,
    output_option,
    output_sink,
    range_params,
    with_client,
)
from lora_portal_client.client import Client
from lora_portal_client.config import load_settings
from lora_portal_client.errors import ExitCode
from lora_portal_client.evidence import NOT_PINNED, verify_file
from lora_portal_client.evidence_keys import pinned_from_option, refreshed_pins
from lora_portal_client.refs import VersionRef

DAY = click.DateTime(formats=["%Y-%m-%d"])


def register(cli: click.Group) -> None:
    for command in (usage, cost, audit, evidence):
        cli.add_command(command)


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
    with output_sink(output) as sink:
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
@click.option(
    "--key",
    metavar="FILE|URL|FINGERPRINT",
    help="verify: the portal's key to pin (its GET /api/v1/evidence/key/ as a URL or saved "
    "file, a PEM or base64 public key, or a sha256: fingerprint); default: the keys `login` "
    "saved.",
)
@output_option
@json_option
def evidence(
    target: str, file: Path | None, key: str | None, output: Path | None, as_json: bool
) -> None:
    """A version's compliance record (`evidence TENANT/ADAPTER@N [-o FILE]`, JSON as the portal
    sent it), or check a saved one against the portal's pinned key (`evidence verify FILE
    [--key ...]`: exit 0 verified, 1 not, and 1 when no key is pinned)."""
    if target == "verify":
        if file is None:
            raise click.UsageError("Give the record to check: `evidence verify FILE`.")
        _verify(file, key, as_json)
        return
    if file is not None or key is not None:
        raise click.UsageError("`evidence TENANT/ADAPTER@N` takes no FILE or --key; use -o FILE.")
    ref = VersionRef.parse(target)
    with client_from_environment() as client, output_sink(output) as sink:
        written = client.evidence_to(ref, sink)
    if output is not None:
        note(f"{ref}: {written} bytes of evidence in {output}")


def _verify(file: Path, key: str | None, as_json: bool) -> None:
    if not file.is_file():
        raise click.UsageError(f"{file} is not a file.")
    settings = load_settings()
    pinned = (
        pinned_from_option(key, settings, warn=note) if key else refreshed_pins(settings, warn=note)
    )
    problems = list(verify_file(file, pinned=pinned))
    body = {
        "file": str(file),
        "ok": not problems,
        "problems": problems,
        "pinned": sorted(pinned.fingerprints) if pinned else [],
    }
    emit(
        as_json,
        body,
        lambda: click.echo(f"{file}: verified" if not problems else "\n".join(problems)),
    )
    if problems:
        if problems == [NOT_PINNED] and not as_json:
            note("The record is whole, but whose signature it carries was not checked.")
        raise click.exceptions.Exit(int(ExitCode.ERROR))
