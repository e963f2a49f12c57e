"""OpenID Connect Back-Channel Logout: a provider's signed logout token ends a person's sessions."""

from __future__ import annotations

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from core.audit import record_event
from tenants.sso.errors import SsoRefused
from tenants.sso.models import SsoIdentity
from tenants.sso.providers import Provider

BACKCHANNEL_EVENT = "http://schemas.openid.net/event/backchannel-logout"
# A logout token's id is remembered this long (longer than any token's lifetime): replays refused.
JTI_MEMORY_SECONDS = 24 * 3600


def backchannel_logout(*, provider: Provider, logout_token: str, request_id: str = "") -> bool:
    """Verify the token (signature, issuer, audience, expiry, event, no nonce, not seen before)
    and end the subject's sessions here. Whether a known person's sessions were ended."""
    from tenants.sso.oidc import ProviderBackend, verify_provider_jwt

    if not logout_token:
        raise SsoRefused("sso.bad_token", "Give the provider's `logout_token`.")
    claims = verify_provider_jwt(
        ProviderBackend(provider), logout_token, audience=provider.client_id
    )
    events = claims.get("events")
    if not isinstance(events, dict) or BACKCHANNEL_EVENT not in events or "nonce" in claims:
        raise SsoRefused("sso.bad_token", "This is not a back-channel logout token.")
    jti = str(claims.get("jti") or "")
    if not jti or not cache.add(f"sso-logout-jti:{provider.name}:{jti}", 1, JTI_MEMORY_SECONDS):
        raise SsoRefused("sso.replayed", "This logout token was used before.")
    with transaction.atomic():
        identity = (
            SsoIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=provider.issuer, subject=str(claims["sub"]))
            .first()
        )
        if identity is None:
            return False
        identity.sessions_ended_at = timezone.now()
        identity.save(update_fields=["sessions_ended_at"])
        record_event(
            action="sso.logout",
            actor=f"sso:{provider.name}",
            obj=identity.user,
            object_id=identity.user.username,
            after={"provider": provider.name, "via": "backchannel"},
            request_id=request_id,
        )
    return True
