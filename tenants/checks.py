"""Deploy checks the tenants app owns (`manage.py check --deploy`): notification e-mail is
encrypted on the way to any SMTP server that is not on this host."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.mail.backends.smtp import EmailBackend as SmtpBackend
from django.utils.module_loading import import_string


def _sends_by_smtp() -> bool:
    try:
        backend = import_string(settings.EMAIL_BACKEND)
    except ImportError:
        return False  # Django's own check reports a backend it cannot import when it sends
    return isinstance(backend, type) and issubclass(backend, SmtpBackend)


def is_local_host(host: str) -> bool:
    """This host by its name or a loopback address; no lookup (a name that resolves to loopback
    today may not tomorrow)."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@register(Tags.security, deploy=True)
def email_is_encrypted(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not _sends_by_smtp():
        return []
    if settings.EMAIL_USE_TLS and settings.EMAIL_USE_SSL:
        return [
            Error(
                "EMAIL_USE_TLS and EMAIL_USE_SSL are both on; Django sends no e-mail then.",
                hint="Keep one: EMAIL_USE_SSL=1 for implicit TLS (port 465), or EMAIL_USE_TLS=1 "
                "for STARTTLS (port 587).",
                id="tenants.E002",
            )
        ]
    if settings.EMAIL_USE_TLS or settings.EMAIL_USE_SSL or is_local_host(settings.EMAIL_HOST):
        return []
    return [
        Error(
            f"E-mail goes to {settings.EMAIL_HOST}:{settings.EMAIL_PORT} over plain SMTP "
            "(EMAIL_USE_TLS and EMAIL_USE_SSL are off): the notifications, and the SMTP password "
            "if one is set, cross the network unencrypted, and anyone on the path can read or "
            "change them.",
            hint="Set EMAIL_USE_TLS=1 (STARTTLS, port 587) or EMAIL_USE_SSL=1 (port 465). Plain "
            "SMTP is only for a relay on this host (localhost or a loopback address).",
            id="tenants.E001",
        )
    ]
