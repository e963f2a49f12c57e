"""`lora-portal`: the command line. Exit codes: errors.ExitCode (docs/cli.md)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from lora_portal_client import cli_aliases, cli_budgets, cli_evals, cli_records, cli_versions, paths
from lora_portal_client.cli_common import emit, json_option, note, warn_if_plain_http, with_client
from lora_portal_client.client import Client
from lora_portal_client.config import (
    URL_ENV,
    EvidencePins,
    Settings,
    config_path,
    load_settings,
    save_settings,
)
from lora_portal_client.errors import ExitCode, PortalError
from lora_portal_client.evidence_keys import pinned_from_option, published_pins
from lora_portal_client.sso import (
    WAIT_SECONDS,
    SsoFlow,
    choose_provider,
    id_token_from_provider,
    sso_providers,
    trade_for_portal_token,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="lora-portal")
def cli() -> None:
    """Push, validate, review, release and route LoRA adapters on a LoRA Portal.

    The portal's URL and a token come from LORA_PORTAL_URL / LORA_PORTAL_TOKEN, else from the
    file `lora-portal login` writes.
    """


@cli.command()
@click.option("--url", envvar=URL_ENV, help="The portal, e.g. https://portal.example.com")
@click.option("--username", help="Trade a username and password for a new token.")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
@click.option("--token-stdin", is_flag=True, help="Store an existing token, read from stdin.")
@click.option("--tenant", help="Bind the new token to one tenant.")
@click.option(
    "--scopes",
    default="read,write",
    show_default=True,
    help="Comma-separated: read, write, approve, inference, admin.",
)
@click.option("--expires-in-days", type=click.IntRange(1, 365), default=90, show_default=True)
@click.option(
    "--evidence-key",
    metavar="FILE|URL|FINGERPRINT",
    help="Pin this as the portal's evidence key (as `evidence verify --key`) instead of the "
    "keys the portal publishes now.",
)
@click.option("--sso", "sso", is_flag=True, help="Sign in through the portal's identity provider.")
@click.option("--sso-provider", help="Which identity provider, when the portal has several.")
@click.option(
    "--no-browser",
    is_flag=True,
    help="With --sso by the loopback redirect: print the sign-in link, do not open a browser.",
)
@click.option(
    "--sso-flow",
    type=click.Choice([flow.value for flow in SsoFlow]),
    default=SsoFlow.AUTO.value,
    show_default=True,
    help="With --sso: the device grant (a code to enter at the provider's page) where the "
    "provider offers it, else a browser sent back to a loopback port; or force one.",
)
@click.option(
    "--sso-timeout",
    type=click.IntRange(1, 3600),
    default=WAIT_SECONDS,
    show_default=True,
    help="With --sso: seconds to wait for the sign-in at the provider.",
)
@json_option
def login(
    url: str | None,
    username: str | None,
    password_stdin: bool,
    token_stdin: bool,
    tenant: str | None,
    scopes: str,
    expires_in_days: int,
    evidence_key: str | None,
    sso: bool,
    sso_provider: str | None,
    no_browser: bool,
    sso_flow: str,
    sso_timeout: int,
    as_json: bool,
) -> None:
    """Save a token (mode 0600) for later commands, and the portal's evidence keys, fetched
    once, that `evidence verify` checks records against."""
    url = (url or load_settings().url).rstrip("/")
    warn_if_plain_http(url)
    if [token_stdin, bool(username), sso].count(True) != 1:
        raise click.UsageError(
            "Give --username (a new token), --sso (a new token through your identity provider) "
            "or --token-stdin (an existing one)."
        )
    scope_list = [s.strip() for s in scopes.split(",") if s.strip()]
    if sso:
        provider = choose_provider(sso_providers(url), sso_provider)
        id_token = id_token_from_provider(
            provider,
            say=note,
            open_browser=not no_browser,
            flow=SsoFlow(sso_flow),
            wait_seconds=sso_timeout,
        )
        token = trade_for_portal_token(
            url,
            {
                "provider": provider["name"],
                "id_token": id_token,
                "scopes": scope_list,
                "tenant": tenant,
                "expires_in_days": expires_in_days,
            },
        )["token"]
    elif token_stdin:
        token = sys.stdin.readline().strip()
    else:
        password = (
            sys.stdin.readline().rstrip("\n")
            if password_stdin
            else click.prompt("Password", hide_input=True, err=True)
        )
        with Client(url) as anonymous:
            issued = anonymous.token_obtain(
                username=str(username),
                password=password,
                scopes=scope_list,
                tenant=tenant,
                expires_in_days=expires_in_days,
            )
        token = issued["token"]
    with Client(url, token) as client:
        me = client.whoami()  # the token works before it is saved
        pins = _evidence_pins(client, Settings(url=url, token=token), evidence_key)
    path = save_settings(url=url, token=token, pins=pins)
    emit(
        as_json,
        {"url": url, "config": str(path), "evidence_keys": pins.keys, **me},
        f"Logged in to {url} as {me['username']}; token saved in {path}.",
    )


def _evidence_pins(client: Client, settings: Settings, given: str | None) -> EvidencePins:
    """What `evidence verify` will pin: the given key (pinned by hand: kept as given), else the
    portal's published keys (refreshed before each check)."""
    if given:
        pinned = pinned_from_option(given, settings, warn=note)
        return EvidencePins(keys=sorted(pinned.fingerprints))
    try:
        return published_pins(client, source=settings.url + paths.EVIDENCE_KEY)
    except (PortalError, ValueError) as exc:
        note(f"warning: no evidence key saved ({exc}); `evidence verify` will need --key.")
        return EvidencePins(keys=[])


@cli.command()
@json_option
@with_client
def whoami(client: Client, as_json: bool) -> None:
    """Who the token belongs to, its scopes and the tenants it reaches."""
    me = client.whoami()

    def text() -> None:
        click.echo(f"{me['username']} at {client.url}")
        if me["platform_roles"]:
            click.echo(f"platform roles: {', '.join(me['platform_roles'])}")
        for m in me["memberships"]:
            click.echo(f"{m['tenant']}: {m['role']}")
        token = me.get("token")
        if token:
            bound = f", bound to {token['tenant']}" if token.get("tenant") else ""
            click.echo(
                f"token {token['prefix']}: {', '.join(token['scopes'])}{bound}, expires {token['expires_at']}"
            )

    emit(as_json, me, text)


cli_versions.register(cli)
cli_aliases.register(cli)
cli_records.register(cli)
cli_evals.register(cli)
cli_budgets.register(cli)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    try:
        result = cli.main(args=args, prog_name="lora-portal", standalone_mode=False)
    except click.ClickException as exc:  # bad arguments, an unreadable file named by one
        return _fail(as_json, PortalError("usage", exc.format_message(), exit_code=ExitCode.USAGE))
    except click.Abort:
        return _fail(as_json, PortalError("aborted", "Aborted.", exit_code=ExitCode.ERROR))
    except PortalError as exc:
        return _fail(as_json, exc)
    return int(result) if isinstance(result, int) else ExitCode.OK


def _fail(as_json: bool, error: PortalError) -> int:
    if as_json:
        body: dict[str, Any] = {"error": error.as_dict(), "exit_code": int(error.exit_code)}
        click.echo(json.dumps(body, indent=2, default=str))
    else:
        where = f" (HTTP {error.status})" if error.status else ""
        click.echo(f"error: {error.code}{where}: {error.message}", err=True)
        for item in (
            (error.details or {}).get("errors", []) if isinstance(error.details, dict) else []
        ):
            click.echo(f"  {item.get('code')}: {item.get('message')}", err=True)
    return int(error.exit_code)


__all__ = ["cli", "config_path", "main"]
