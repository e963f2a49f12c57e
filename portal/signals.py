"""Audit events for logins, successful or not."""

from __future__ import annotations

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from core.audit import record_event
from core.login_guard import record_login_failure


def _request_id(request) -> str:
    return getattr(request, "request_id", "") if request is not None else ""


@receiver(user_logged_in)
def audit_login(sender, request, user, **kwargs):
    record_event(
        action="auth.login",
        actor=user,
        obj=user,
        object_id=user.get_username(),
        request_id=_request_id(request),
    )


@receiver(user_login_failed)
def audit_login_failed(sender, credentials, request=None, **kwargs):
    # Counted, and audited at most once per address, username and window (core.login_guard).
    record_login_failure(username=str(credentials.get("username", ""))[:150], request=request)
