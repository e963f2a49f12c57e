"""Beat's entry into tenants: thin; the logic is in tenants/sso/services."""

from __future__ import annotations

from celery import shared_task

# The notification tasks live beside their package; imported here so every process has them.
from tenants.notifications.tasks import deliver, requeue_stalled  # noqa: F401


@shared_task(name="tenants.tasks.recheck_sso_token_holders", acks_late=True, ignore_result=True)
def recheck_sso_token_holders() -> None:
    """Idempotent: each run asks the providers about whoever holds live API tokens now."""
    from tenants.sso.services.token_recheck import recheck_token_holders

    recheck_token_holders()


@shared_task(
    name="tenants.sso.mail_platform_admins",
    autoretry_for=(OSError,),
    retry_backoff=30,
    max_retries=8,
    acks_late=True,
    ignore_result=True,
)
def mail_platform_admins(provider: str, detail: str) -> None:
    """A provider refuses the portal's client: the platform admins' e-mail (SMTP errors are
    OSErrors: retried with a doubling wait)."""
    from tenants.sso.services.alerts import mail_platform_admins as send

    send(provider=provider, detail=detail)
