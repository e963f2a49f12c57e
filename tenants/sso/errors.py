"""The one error of a refused sign-in: its code says what was wrong (docs/sso.md lists them)."""

from __future__ import annotations

from core.errors import ApplicationError


class SsoRefused(ApplicationError):
    """Not PermissionDenied on purpose: Django's authenticate() swallows that one."""

    status = 400
