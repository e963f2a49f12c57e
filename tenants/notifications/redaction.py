"""What the audit chain keeps of a webhook's URL (no Django): the scheme and the host, never the
path, query, fragment or user info, which chat integrations and many receivers use as the bearer
secret (`https://hooks.example.com/services/T0/B0/XXXX`). The chain is immutable and exported, so
a secret written there could never be withdrawn; every audit write of a webhook goes through
`audit_url`."""

from __future__ import annotations

from urllib.parse import urlsplit

REDACTED = "[redacted]"


def audit_url(url: str) -> str:
    """`https://hooks.example.com/[redacted]` for a URL with a path or query; the scheme and host
    (with a port, if any) for one without. Whatever cannot be read becomes `[redacted]`."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED
    if not parts.scheme or not host:
        return REDACTED
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    origin = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    hidden = parts.path not in ("", "/") or parts.query or parts.fragment
    return f"{origin}/{REDACTED}" if hidden else f"{origin}/"
