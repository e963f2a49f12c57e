"""Writes for service classes as plans (weight, longest queue wait, may be shed) and for a
token's lower class. Every change is audited; docs/classes.md says what the numbers mean."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from core.audit import record_event
from core.errors import ApplicationError, clean_or_raise
from tenants.models import ApiToken, ServiceClass, SloClass

CLASS_FIELDS = ("weight", "max_queue_wait_ms", "sheddable")
# Highest first: a token may be given its tenant's class or one after it here, never one before.
CLASS_ORDER = (SloClass.GOLD, SloClass.SILVER, SloClass.BRONZE)


def _snapshot(obj: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in fields}


def service_class_update(
    *, access: Any, service_class: ServiceClass, request_id: str = "", **changes: Any
) -> ServiceClass:
    """A platform admin changes a class's plan; the gateway's tables pick it up on change."""
    access.require_platform_role("is_platform_admin")
    unknown = set(changes) - set(CLASS_FIELDS)
    if unknown:
        raise ApplicationError(
            "service_class.unknown_field",
            f"Unknown service class field(s): {', '.join(sorted(unknown))}; "
            f"editable: {', '.join(CLASS_FIELDS)}.",
        )
    with transaction.atomic():
        locked = ServiceClass.objects.select_for_update().get(pk=service_class.pk)
        before = _snapshot(locked, tuple(changes))
        for key, value in changes.items():
            setattr(locked, key, value)
        clean_or_raise(locked, validate_unique=False)
        locked.updated_at = timezone.now()
        locked.save()
        record_event(
            action="service_class.update",
            actor=access.user,
            obj=locked,
            before=before,
            after=_snapshot(locked, tuple(changes)),
            request_id=request_id,
        )
    return locked


def class_rank(name: str) -> int:
    return CLASS_ORDER.index(SloClass(name))


def token_class_set(
    *, access: Any, token: ApiToken, service_class: str, request_id: str = ""
) -> ApiToken:
    """Give a tenant's token a lower class than its tenant's (a batch pipeline), or '' for the
    tenant's own; never a higher one. Who may: whoever may revoke the token."""
    access.require_token_revoke(token)
    if service_class and service_class not in SloClass.values:
        raise ApplicationError(
            "token.bad_service_class",
            f"service_class must be one of {', '.join(SloClass.values)}, or empty for the "
            "tenant's own class.",
        )
    tenant = token.tenant
    if service_class and tenant is None:
        raise ApplicationError(
            "token.service_class_needs_tenant",
            "Only a token bound to a tenant can be given a service class; bind it to one.",
        )
    if (
        service_class
        and tenant is not None
        and class_rank(service_class) < class_rank(tenant.slo_class)
    ):
        raise ApplicationError(
            "token.service_class_above_tenant",
            f"A token may not have a higher class than its tenant's ({tenant.slo_class}); "
            f"choose {tenant.slo_class} or lower.",
        )
    with transaction.atomic():
        locked = ApiToken.objects.select_for_update().get(pk=token.pk)
        before = locked.service_class
        locked.service_class = service_class
        locked.save(update_fields=["service_class"])
        record_event(
            action="token.service_class",
            actor=access.user,
            tenant=token.tenant,
            obj=locked,
            before={"service_class": before},
            after={"service_class": service_class},
            request_id=request_id,
        )
    return locked
