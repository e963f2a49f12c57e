"""The client's address as the portal sees it behind TRUSTED_PROXY_COUNT reverse proxies.

One function, used by the login lockout (django-axes), the token endpoint's throttle and the
failed-login audit, so every limit keys on the same address.
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
    remote = str(meta.get("REMOTE_ADDR", "") or "")
    trusted = settings.TRUSTED_PROXY_COUNT
    if trusted <= 0:
        return remote
    hops = [hop.strip() for hop in str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
    hops = [hop for hop in hops if hop]
    if not hops:
        return remote
    return hops[-min(trusted, len(hops))]
