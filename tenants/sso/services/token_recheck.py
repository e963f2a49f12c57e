"""The server-side re-check of people who use API tokens only: the session re-check
(recheck.py) runs when a browser comes back, so without this a person disabled at the provider
(or whose groups changed there) would keep their tokens until their next sign-in.

Each identity whose user holds a live token is asked about with the refresh token of its last
browser sign-in, through the same recheck_session as a session: a refusal withdraws what the
mapping gave and revokes every token, a success syncs the refreshed claims (a lost group revokes
that tenant's tokens). An identity without a refresh token cannot be asked: its tokens are
revoked once its last ID token's expiry plus SSO_RECHECK_SECONDS has passed, so no one keeps API
access longer than a browser session would (docs/sso.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from tenants.models import ApiToken
from tenants.services.tokens import tokens_revoke_for_user
from tenants.sso.models import SsoIdentity
from tenants.sso.sealing import unseal
from tenants.sso.services.recheck import recheck_session

logger = logging.getLogger(__name__)

# Outcomes that say nothing about the person (the provider is down, answered nonsense, or
# refused the portal's own client: the platform admins are alerted): the tokens stay, and the
# next run asks again.
INCONCLUSIVE = {"sso.provider_unreachable", "sso.bad_token", "sso.provider_misconfigured"}


@dataclass
class TokenRecheckReport:
    checked: int = 0
    ended: dict[str, str] = field(default_factory=dict)  # "provider:subject" -> code


def recheck_token_holders(*, request_id: str = "") -> TokenRecheckReport:
    now = timezone.now()
    live = ApiToken.objects.filter(revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    )
    holders = SsoIdentity.objects.select_related("user").filter(
        user__in=live.values("user"), user__is_active=True
    )
    report = TokenRecheckReport()
    for identity in holders.order_by("pk"):
        report.checked += 1
        ended = _recheck(identity, now=now, request_id=request_id)
        if ended is not None:
            report.ended[str(identity)] = ended
    return report


def _recheck(identity: SsoIdentity, *, now: datetime, request_id: str) -> str | None:
    refresh_token = unseal(identity.refresh_token_sealed)
    if not refresh_token:
        grace = timedelta(seconds=settings.SSO_RECHECK_SECONDS)
        if identity.id_token_expires_at is not None and now < identity.id_token_expires_at + grace:
            return None
        tokens_revoke_for_user(
            user=identity.user,
            actor=f"sso:{identity.provider}",
            reason="sso.cannot_recheck",
            request_id=request_id,
        )
        return "sso.cannot_recheck"
    result = recheck_session(
        identity=identity,
        provider_name=identity.provider,
        refresh_token=refresh_token,
        request_id=request_id,
    )
    if result.ended in INCONCLUSIVE:
        logger.warning("SSO token re-check of %s inconclusive: %s", identity, result.ended)
        return None
    if result.ended is None:  # recheck_session kept the rotated refresh token
        return None
    # Refused (what the mapping gave is withdrawn, every token revoked), maps nowhere (the sync
    # revoked them), or the provider is no longer configured: nothing can vouch for these tokens.
    if result.ended not in ("sso.provider_refused", "sso.maps_nowhere"):
        tokens_revoke_for_user(
            user=identity.user,
            actor=f"sso:{identity.provider}",
            reason=result.ended,
            request_id=request_id,
        )
    identity.refresh_token_sealed = ""  # the grant is dead; a new sign-in brings a new one
    identity.save(update_fields=["refresh_token_sealed"])
    return result.ended
