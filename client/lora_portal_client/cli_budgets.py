"""`budget list|set|request-raise`: a tenant's token budgets, and asking a platform admin for more."""

from __future__ import annotations

from typing import Any

import click

from lora_portal_client.cli_common import emit, json_option, with_client
from lora_portal_client.client import Client

WINDOWS = ("day", "week", "month", "total")


def register(cli: click.Group) -> None:
    cli.add_command(budget)


@click.group()
def budget() -> None:
    """Token budgets per tenant, API token (token:ID) or alias (alias:NAME)."""


def _line(found: dict[str, Any]) -> str:
    resets = found.get("resets_at") or "never"
    forecast = found.get("forecast_exhausted_at") or "-"
    return (
        f"{found['id']}\t{found['scope']}\t{found['window']}\tused {found.get('used', 0)}"
        f"/{found['tokens']}\tremaining {found.get('remaining', '-')}\tresets {resets}"
        f"\truns out {forecast}"
    )


def _thresholds(raw: str | None) -> list[int] | None:
    if raw is None:
        return None
    try:
        return [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise click.UsageError("--thresholds is a list of percents, e.g. 50,80,100.") from None


@budget.command("list")
@click.argument("tenant")
@json_option
@with_client
def budget_list(client: Client, tenant: str, as_json: bool) -> None:
    """Each budget of TENANT and where it stands this window."""
    found = client.budgets(tenant)
    emit(as_json, found, "\n".join(_line(b) for b in found) or "no budgets")


@budget.command("set")
@click.argument("tenant")
@click.option("--scope", default="tenant", show_default=True, help="tenant, token:ID or alias:NAME")
@click.option("--tokens", type=click.IntRange(min=1), required=True, help="The ceiling.")
@click.option("--window", type=click.Choice(WINDOWS), default="month", show_default=True)
@click.option("--thresholds", default=None, help="Alert at these percents (default 50,80,100).")
@json_option
@with_client
def budget_set(
    client: Client,
    tenant: str,
    scope: str,
    tokens: int,
    window: str,
    thresholds: str | None,
    as_json: bool,
) -> None:
    """Set the budget of SCOPE and WINDOW in TENANT: created, or its tokens changed."""
    body: dict[str, Any] = {"tokens": tokens}
    if (percents := _thresholds(thresholds)) is not None:
        body["thresholds"] = percents
    existing = next(
        (b for b in client.budgets(tenant) if b["scope"] == scope and b["window"] == window),
        None,
    )
    if existing is None:
        found = client.budget_create(tenant, {**body, "scope": scope, "window": window})
    else:
        found = client.budget_update(tenant, int(existing["id"]), body)
    emit(as_json, found, _line(found))


@budget.command("request-raise")
@click.argument("tenant")
@click.argument("budget_id", type=int)
@click.option("--tokens", type=click.IntRange(min=1), required=True, help="The ceiling asked for.")
@click.option(
    "--permanent", is_flag=True, help="For good (default: the rest of the current window)."
)
@click.option("--reason", required=True, help="Why, for the platform admin who decides.")
@json_option
@with_client
def budget_request_raise(
    client: Client,
    tenant: str,
    budget_id: int,
    tokens: int,
    permanent: bool,
    reason: str,
    as_json: bool,
) -> None:
    """Ask a platform admin to raise budget BUDGET_ID of TENANT (owners only)."""
    found = client.budget_raise_request(
        tenant,
        budget_id,
        {"tokens": tokens, "duration": "permanent" if permanent else "window", "reason": reason},
    )
    emit(
        as_json,
        found,
        f"raise request {found['id']}: {found['scope']} {found['previous_tokens']} -> "
        f"{found['tokens']} ({found['duration']}), {found['status']}",
    )
