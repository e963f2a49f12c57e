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
