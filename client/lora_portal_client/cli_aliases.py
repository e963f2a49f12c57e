"""`alias set|promote|rollback|weights|show`: the names callers use, and their canary weights
(`alias release` and `alias plan ...`: cli_releases)."""

from __future__ import annotations

from typing import Any

import click

from lora_portal_client import cli_releases
from lora_portal_client.cli_common import ALIAS, emit, json_option, with_client
from lora_portal_client.client import Client
from lora_portal_client.refs import AliasRef, parse_target


def register(cli: click.Group) -> None:
    cli.add_command(alias)
    cli_releases.register(alias)


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
