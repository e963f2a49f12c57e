"""Where a webhook may be posted (no Django): http(s) only, and only to public addresses unless
the operator allows private ones. Checked when an endpoint is saved and again, on the address the
name resolves to then, at every send (a name may move to 127.0.0.1 after it was saved)."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit


class AddressRefused(Exception):
    """The URL may not be posted to: `code` is stable, the message says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Target:
    """A checked URL: its scheme, host and port, and the address to connect to."""

    scheme: str
    host: str
    port: int
    address: str


def check_url_form(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a well-formed http(s) URL with no user info, else AddressRefused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise AddressRefused("webhook.bad_url", "url is not a valid URL.") from None
    if parts.scheme not in ("http", "https"):
        raise AddressRefused("webhook.bad_scheme", "url must start with http:// or https://.")
    if not parts.hostname:
        raise AddressRefused("webhook.bad_url", "url has no host.")
    if parts.username is not None or parts.password is not None:
        raise AddressRefused(
            "webhook.bad_url", "url must not carry a user name or password; sign with the secret."
        )
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def is_public(address: str) -> bool:
    """Globally routable unicast: not private, loopback, link-local, shared, reserved or multicast
    (an IPv4 address mapped into IPv6 is judged as itself)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip.is_site_local:
            return False
    return ip.is_global and not ip.is_multicast and not ip.is_reserved


def resolve(url: str, *, allow_private: bool) -> Target:
    """The address to post `url` to, once every address its host resolves to is allowed."""
    scheme, host, port = check_url_form(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise AddressRefused("webhook.unresolvable", f"'{host}' does not resolve: {exc}.") from None
    addresses = sorted({str(info[4][0]) for info in infos})
    if not addresses:
        raise AddressRefused("webhook.unresolvable", f"'{host}' resolves to no address.")
    if not allow_private:
        refused = [a for a in addresses if not is_public(a)]
        if refused:
            raise AddressRefused(
                "webhook.private_address",
                f"'{host}' resolves to {', '.join(refused)}: a private, loopback or link-local "
                "address; webhooks go to public addresses only.",
            )
    return Target(scheme=scheme, host=host, port=port, address=addresses[0])
