"""Telling the platform admins that single sign-on is broken by the portal's own settings (a
provider refuses its client): once per provider and SSO_ALERT_SECONDS, audited, and e-mailed to
every active platform admin with an address, by the notifications' e-mail (settings EMAIL_*)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Q

from core.audit import record_event
from core.tasks import task_named
from tenants.roles import PlatformRole

logger = logging.getLogger(__name__)


def alert_provider_misconfigured(*, provider: str, detail: str, request_id: str = "") -> bool:
    """Whether this call raised the alert (False: it was raised within the window already)."""
    logger.error("SSO provider %s refuses the portal's client: %s", provider, detail)
    if not cache.add(f"sso-alert:misconfigured:{provider}", 1, settings.SSO_ALERT_SECONDS):
        return False
    record_event(
        action="sso.provider_misconfigured",
        actor=f"sso:{provider}",
        object_type="sso.provider",
        object_id=provider,
        after={"detail": detail[:500]},
        request_id=request_id,
    )
    transaction.on_commit(
        lambda: task_named("tenants.sso.mail_platform_admins").delay(provider, detail[:500])
    )
    return True


def platform_admin_emails() -> list[str]:
    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    admins = users.filter(Q(groups__name=PlatformRole.PLATFORM_ADMIN) | Q(is_superuser=True))
    return sorted({email.lower() for email in admins.values_list("email", flat=True)})


def mail_platform_admins(*, provider: str, detail: str) -> int:
    """The alert's e-mail; how many it went to."""
    recipients = platform_admin_emails()
    if not recipients:
        return 0
    EmailMessage(
        subject=f"Single sign-on: the provider '{provider}' refuses the portal's client",
        body=(
            f"The identity provider '{provider}' refused the portal's client: {detail}\n\n"
            "Nobody's access was withdrawn for it: the re-checks of signed-in people are tried "
            "again at each run until the provider accepts the client. Check the provider's "
            "entry in OIDC_PROVIDERS (client id, the secret's variable) and the client's "
            "registration at the provider (docs/sso.md)."
        ),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=recipients,
    ).send(fail_silently=False)
    return len(recipients)
