"""What every command shares: `--json`, the client from the environment, output, argument types."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import click

from lora_portal_client.client import Client
from lora_portal_client.config import plain_http_warning
from lora_portal_client.errors import PortalError
from lora_portal_client.files import private_file
from lora_portal_client.refs import AdapterRef, AliasRef, VersionRef

F = TypeVar("F", bound=Callable[..., Any])


def json_option(command: F) -> F:
    """`--json` on every command: machine-readable output on stdout (errors too)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(
        command
    )


def output_option(command: F) -> F:
    """`-o FILE`: where a download goes (default: stdout)."""
    return click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write here (default: stdout).",
    )(command)


def warn_if_plain_http(url: str) -> None:
    warning = plain_http_warning(url)
    if warning:
        note(f"warning: {warning}")


def client_from_environment() -> Client:
    """The Client of LORA_PORTAL_URL/LORA_PORTAL_TOKEN or the config file, warning on stderr
    when its token would travel unencrypted."""
    client = Client.from_environment()
    warn_if_plain_http(client.url)
    return client


def with_client(command: F) -> F:
    """Passes a Client built from LORA_PORTAL_URL/LORA_PORTAL_TOKEN or the config file."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with client_from_environment() as client:
            return command(client, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def emit(as_json: bool, data: Any, text: str | Callable[[], None]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    elif callable(text):
        text()
    else:
        click.echo(text)


def note(message: str) -> None:
    """Progress for people, on stderr, so stdout stays what a pipeline captures."""
    click.echo(message, err=True)


class _RefType(click.ParamType):
    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except PortalError as exc:
            self.fail(exc.message, param, ctx)


VERSION = _RefType("TENANT/ADAPTER@N", VersionRef.parse)
ADAPTER = _RefType("TENANT/ADAPTER", AdapterRef.parse)
ALIAS = _RefType("TENANT/ALIAS", AliasRef.parse)


def range_params(**values: str | None) -> dict[str, str]:
    """Query parameters from options, leaving out those not given (`from_` -> `from`)."""
    return {key.rstrip("_"): value for key, value in values.items() if value}


def version_line(version: dict[str, Any]) -> str:
    ref = f"{version['tenant']}/{version['adapter']}@{version['number']}"
    return f"{ref}  {version['status']}  {version.get('served_name', '')}".rstrip()


@contextmanager
def output_sink(output: Path | None) -> Iterator[BinaryIO]:
    """The -o file (0600, written whole or not at all, never through a link), else stdout."""
    if output is None:
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    with private_file(output) as stream:
        yield stream
