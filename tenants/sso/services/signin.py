"""A verified ID token's claims -> the portal user, created on first sign-in, synced every time."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from core.audit import record_event
from tenants.sso.errors import SsoRefused
from tenants.sso.models import SsoIdentity
from tenants.sso.providers import Provider
from tenants.sso.resolution import resolve_claims, verified_email
from tenants.sso.sealing import seal
from tenants.sso.services.sync import apply_sync

User = get_user_model()


def sso_sign_in(
    *, provider: Provider, claims: dict[str, Any], refresh_token: str = "", request_id: str = ""
) -> Any:
    """The user behind (issuer, subject). Claims that map nowhere refuse the sign-in; for a
    person who had access, the sync first takes away what the mapping gave (committed). The
    refresh token (if the provider gave one) is kept sealed for the re-check of API tokens."""
    subject = str(claims["sub"])
    resolution = resolve_claims(provider.name, claims)
    identity = (
        SsoIdentity.objects.select_related("user")
        .filter(issuer=provider.issuer, subject=subject)
        .first()
    )
    if identity is None and resolution.is_empty:
        raise SsoRefused(
            "sso.maps_nowhere",
            "Your identity provider vouches for you, but none of your groups gives access to "
            "this portal. Ask a platform admin to map one of them.",
            status=403,
        )
    with transaction.atomic():
        if identity is None:
            identity = _create_identity(provider, claims, request_id=request_id)
        elif not identity.user.is_active:
            raise SsoRefused("sso.user_disabled", "Your portal account is disabled.", status=403)
        changes = apply_sync(identity=identity, resolution=resolution, request_id=request_id)
        identity.verified_email = verified_email(claims)
        identity.last_sign_in_at = timezone.now()
        identity.id_token_expires_at = datetime.fromtimestamp(float(claims["exp"]), tz=UTC)
        fields = ["verified_email", "last_sign_in_at", "id_token_expires_at"]
        if refresh_token:  # a sign-in without one (the CLI) keeps the browser's
            identity.refresh_token_sealed = seal(refresh_token)
            fields.append("refresh_token_sealed")
        identity.save(update_fields=fields)
        if not resolution.is_empty:
            record_event(
                action="sso.sign_in",
                actor=identity.user,
                obj=identity.user,
                object_id=identity.user.username,
                after={
                    "provider": provider.name,
                    "subject": subject,
                    **resolution.as_dict(),
                    "changes": [c.as_dict() for c in changes],
                },
                request_id=request_id,
            )
    if resolution.is_empty:
        raise SsoRefused(
            "sso.maps_nowhere",
            "None of your groups gives access to this portal any more; what they gave was "
            "removed. Ask a platform admin if this is wrong.",
            status=403,
        )
    return identity.user


def _create_identity(provider: Provider, claims: dict[str, Any], *, request_id: str) -> SsoIdentity:
    username = _free_username(claims)
    user = User(username=username, email=verified_email(claims))
    user.set_unusable_password()  # this person signs in through the provider only
    user.save()
    identity = SsoIdentity.objects.create(
        user=user, provider=provider.name, issuer=provider.issuer, subject=str(claims["sub"])
    )
    record_event(
        action="sso.user_create",
        actor=f"sso:{provider.name}",
        obj=user,
        object_id=username,
        after={"username": username, "provider": provider.name, "subject": identity.subject},
        request_id=request_id,
    )
    return identity


def _free_username(claims: dict[str, Any]) -> str:
    """A readable username (the provider's preferred one, cleaned); never the key of anything."""
    wanted = claims.get("preferred_username") or str(claims.get("email", "")).split("@")[0]
    base = re.sub(r"[^\w.@+-]", "", str(wanted))[:120] or "sso-user"
    candidate, n = base, 1
    while User.objects.filter(username=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate
