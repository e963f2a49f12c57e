"""What the next ID token should get wrong (one at a time, set by the control endpoint), kept in
a file beside the database so that every worker thread of the provider sees it."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings

MODES = ("expired", "audience", "issuer", "foreign-key")


def _path() -> Path:
    return Path(settings.DATABASES["default"]["NAME"]).parent / "tamper-next"


def arm(how: str) -> None:
    _path().write_text(how)


def take() -> str | None:
    path = _path()
    try:
        how = path.read_text()
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    return how or None


@cache
def foreign_key_pem() -> bytes:
    """A key this provider never published: a token signed with it has a bad signature."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
