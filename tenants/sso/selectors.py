"""Reads about SSO people for the other rules (the four-eyes check in adapters/access.py)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from tenants.sso.models import SsoIdentity


def person_emails(user_id: int) -> set[str]:
    """The e-mail addresses behind an account: its own, and those its providers verified. Two
    accounts sharing one are taken for one person by the four-eyes rule (which may refuse more,
    never allow more: sign-in itself never matches by e-mail)."""
    verified = SsoIdentity.objects.filter(user_id=user_id).exclude(verified_email="")
    own = get_user_model().objects.filter(pk=user_id).values_list("email", flat=True)
    emails = own.union(verified.values_list("verified_email", flat=True))  # one query
    return {email.strip().lower() for email in emails if email and email.strip()}
