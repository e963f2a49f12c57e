"""The client's address as the portal sees it behind TRUSTED_PROXY_COUNT reverse proxies.

One rule, used by the login lockout (django-axes), the token endpoint's throttle, the
failed-login audit and the gateway's per-address limit, so every limit keys on the same address.
"""

from __future__ import annotations

from django.conf import settings


def client_ip(request) -> str:
    """REMOTE_ADDR with no trusted proxy; else the address the outermost trusted proxy saw.

    Each trusted proxy appends the address it received the request from to X-Forwarded-For, so
    with N proxies the Nth entry from the right is the client's, and anything left of it is
    whatever the client wrote itself. A header shorter than N entries means a request that
    bypassed a proxy: its leftmost entry is the best we have.
    """
    meta = request.META
    return address_behind_proxies(
        str(meta.get("REMOTE_ADDR", "") or ""), str(meta.get("HTTP_X_FORWARDED_FOR", ""))
    )


def address_behind_proxies(remote: str, forwarded_for: str) -> str:
    """The client's address from the peer's and the X-Forwarded-For header (client_ip's rule,
    also for the gateway, which sees an ASGI scope rather than a Django request)."""
    trusted = settings.TRUSTED_PROXY_COUNT
    if trusted <= 0:
        return remote
    hops = [hop.strip() for hop in forwarded_for.split(",")]
    hops = [hop for hop in hops if hop]
    if not hops:
        return remote
    return hops[-min(trusted, len(hops))]
