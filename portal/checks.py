"""Deploy checks the portal app owns (`manage.py check --deploy`)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


@register(Tags.security, deploy=True)
def audit_chain_key_is_its_own(app_configs, **kwargs):
    if settings.DEBUG or not settings.AUDIT_CHAIN_KEY_DERIVED:
        return []
    return [
        Warning(
            "AUDIT_CHAIN_KEY is not set: the audit chain's HMAC key is derived from SECRET_KEY, "
            "so rotating SECRET_KEY would make every existing audit event fail the chain check.",
            hint="Set AUDIT_CHAIN_KEY to a secret of 32+ characters kept outside the database, "
            "and never change it.",
            id="portal.W001",
        )
    ]


@register(Tags.security, deploy=True)
def evidence_signing_key_is_set(app_configs, **kwargs):
    if settings.DEBUG or settings.EVIDENCE_SIGNING_KEY:
        return []
    return [
        Error(
            "EVIDENCE_SIGNING_KEY is not set: it is required when DJANGO_DEBUG is off. Without "
            "it the portal cannot sign compliance records (their endpoints answer 503).",
            hint="Set EVIDENCE_SIGNING_KEY to 64 random hex digits (an Ed25519 seed, e.g. "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`) kept outside the "
            "database; on a rotation, move the old public key to EVIDENCE_VERIFY_KEYS "
            "(docs/security.md).",
            id="portal.E002",
        )
    ]
