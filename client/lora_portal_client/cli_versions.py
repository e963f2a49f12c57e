"""Commands on versions: push, wait, approve, reject, release, disable, status, versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from lora_portal_client.cli_common import (
    ADAPTER,
    VERSION,
    emit,
    json_option,
    note,
    version_line,
    with_client,
)
from lora_portal_client.client import Client
from lora_portal_client.push import DEFAULT_DIRECT_THRESHOLD, MiB, push
from lora_portal_client.refs import AdapterRef, VersionRef
from lora_portal_client.waiting import TARGETS, refusal_reasons, wait_for


def register(cli: click.Group) -> None:
    for command in (push_command, wait, approve, reject, release, disable, status, versions):
        cli.add_command(command)


@click.command("push")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--tenant", required=True)
@click.option("--adapter", required=True)
@click.option(
    "--sign",
    "sign_key",
    type=click.Path(dir_okay=False, path_type=Path),
    help="PEM private key (Ed25519, ECDSA P-256/P-384) registered with the tenant.",
)
@click.option(
    "--direct-threshold-mib",
    type=click.FloatRange(min=0),
    default=DEFAULT_DIRECT_THRESHOLD / MiB,
    show_default=True,
    help="Model files this large or larger go straight to object storage in parts.",
)
@click.option("--part-size-mib", type=click.IntRange(5, 5120), help="Part size of the direct path.")
@click.option(
    "--wait",
    "wait_until",
    is_flag=False,
    flag_value="validated",
    type=click.Choice(TARGETS),
    help="Then wait (default: until validated).",
)
@click.option("--timeout", type=click.FloatRange(min=0), default=600.0, show_default=True)
@json_option
@with_client
def push_command(
    client: Client,
    directory: Path,
    tenant: str,
    adapter: str,
    sign_key: Path | None,
    direct_threshold_mib: float,
    part_size_mib: int | None,
    wait_until: str | None,
    timeout: float,
    as_json: bool,
) -> None:
    """Upload DIR (adapter_config.json, adapter_model.safetensors) as a new version; prints
    TENANT/ADAPTER@N."""
    ref = AdapterRef.parse(f"{tenant}/{adapter}")
    with _progress_bar(quiet=as_json) as bar:

        def start(total: int) -> Any:
            task = bar.add_task("upload", total=total)
            return lambda sent: bar.advance(task, sent)

        version = push(
            client,
            ref,
            directory,
            sign_key=sign_key,
            direct_threshold=int(direct_threshold_mib * MiB),
            part_size=part_size_mib * MiB if part_size_mib else None,
            progress=start,
        )
    if wait_until:
        number = VersionRef(ref.tenant, ref.adapter, int(version["number"]))
        if not as_json:
            click.echo(str(number))  # the pipeline has its name before the (long) wait
        version = wait_for(
            client, number, until=wait_until, timeout=timeout, on_change=_report_change(as_json)
        )
        emit(as_json, version, lambda: None)
        return
    emit(as_json, version, f"{version['tenant']}/{version['adapter']}@{version['number']}")


def _progress_bar(*, quiet: bool) -> Progress:
    return Progress(
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=quiet,
    )


def _report_change(as_json: bool) -> Any:
    def report(version: dict[str, Any]) -> None:
        if not as_json:
            note(
                f"{version['tenant']}/{version['adapter']}@{version['number']}: {version['status']}"
            )

    return report


@click.command()
@click.argument("ref", type=VERSION)
@click.option("--until", type=click.Choice(TARGETS), default="validated", show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0), default=600.0, show_default=True)
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True)
@json_option
@with_client
def wait(
    client: Client, ref: VersionRef, until: str, timeout: float, interval: float, as_json: bool
) -> None:
    """Follow a version until it is UNTIL (exit 0), refused (2, with the reasons) or TIMEOUT (3)."""
    version = wait_for(
        client,
        ref,
        until=until,
        timeout=timeout,
        interval=interval,
        on_change=_report_change(as_json),
    )
    emit(as_json, version, version_line(version))


def _decision(name: str, field: str) -> click.Command:
    @click.command(name)
    @click.argument("ref", type=VERSION)
    # What a decision needs (a rejection's reason) is the portal's rule: its error says so.
    @click.option(f"--{field}", "text", default="", help=f"The {field}, audited.")
    @json_option
    @with_client
    def command(client: Client, ref: VersionRef, text: str, as_json: bool) -> None:
        version = getattr(client, name)(ref, **{field: text})
        emit(as_json, version, version_line(version))

    command.help = {
        "approve": "Approve a validated version (reviewers; never its uploader): it is staged.",
        "reject": "Reject a version under review, with a reason.",
        "release": "Release a staged version (tenant owners): it is active and servable.",
        "disable": "Stop serving a version at once; workers unload it everywhere.",
    }[name]
    return command


approve = _decision("approve", "comment")
reject = _decision("reject", "reason")
release = _decision("release", "comment")
disable = _decision("disable", "reason")


@click.command()
@click.argument("ref", type=VERSION)
@json_option
@with_client
def status(client: Client, ref: VersionRef, as_json: bool) -> None:
    """A version: status, checks that failed, decisions, and where it is resident."""
    version = client.version(ref)
    placement = client.residency(ref)
    body = {**version, "residency": placement}

    def text() -> None:
        click.echo(version_line(version))
        for key in ("rank", "alpha", "size_bytes", "manifest_sha256", "signer", "uploaded_by"):
            if version.get(key) not in (None, ""):
                click.echo(f"  {key}: {version[key]}")
        for reason in refusal_reasons(version):
            click.echo(f"  refused: {reason['code']}: {reason['message']}")
        for d in version.get("decisions", []):
            click.echo(f"  {d['created_at']} {d['kind']} by {d['actor']}: {d.get('comment', '')}")
        for p in placement:
            click.echo(f"  engine {p['engine']}: {p['tier']} ({p['observed_state']})")

    emit(as_json, body, text)


@click.command()
@click.argument("ref", type=ADAPTER)
@click.option("--status", "only", help="Only versions in this status.")
@json_option
@with_client
def versions(client: Client, ref: AdapterRef, only: str | None, as_json: bool) -> None:
    """An adapter's versions."""
    rows = client.versions(ref, status=only)
    emit(as_json, rows, "\n".join(version_line(v) for v in rows))
