"""Make a person's SSO-managed memberships and platform roles match what their claims map to.

Only what the mapping made is touched: memberships with source `sso` and the platform roles in
the identity's `managed_platform_roles`. A membership given by hand stays as it is (and is
reported as kept). Every change is audited; tokens bound to a tenant the person lost are revoked
in the same transaction, all of them when nothing is left, so an API token stops working at the
moment the mapping removes its owner.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.contrib.auth.models import Group
from django.db import transaction

from core.audit import record_event
from tenants.models import Membership, MembershipSource, PlatformRole, Tenant
from tenants.services.tokens import tokens_revoke_for_user
from tenants.sso.models import SsoIdentity
from tenants.sso.resolution import Resolution


@dataclass(frozen=True)
class SyncChange:
    """One difference between what someone has and what their claims map to."""

    change: str  # add | change | remove | kept-manual
    tenant: str = ""  # a tenant's slug, or "" for a platform role
    platform_role: str = ""
    before: str | None = None
    after: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", None)}


def plan_sync(
    *, user: Any, identity: SsoIdentity | None, resolution: Resolution
) -> list[SyncChange]:
    """What apply_sync would change for `user` (None: a person who never signed in)."""
    changes: list[SyncChange] = []
    held = {} if user is None else {m.tenant_id: m for m in Membership.objects.filter(user=user)}
    slugs = dict(Tenant.objects.filter(pk__in=held).values_list("pk", "slug"))
    for tenant_id, role in sorted(resolution.tenant_roles.items()):
        slug = resolution.tenant_slugs[tenant_id]
        membership = held.get(tenant_id)
        if membership is None:
            changes.append(SyncChange("add", tenant=slug, after=role))
        elif membership.source == MembershipSource.MANUAL:
            changes.append(SyncChange("kept-manual", tenant=slug, before=membership.role))
        elif membership.role != role:
            changes.append(SyncChange("change", tenant=slug, before=membership.role, after=role))
    for tenant_id, membership in sorted(held.items()):
        if membership.source == MembershipSource.SSO and tenant_id not in resolution.tenant_roles:
            changes.append(SyncChange("remove", tenant=slugs[tenant_id], before=membership.role))
    has = set() if user is None else set(user.groups.values_list("name", flat=True))
    managed = set(identity.managed_platform_roles) if identity is not None else set()
    for role in sorted(resolution.platform_roles - has):
        changes.append(SyncChange("add", platform_role=role, after=role))
    for role in sorted((managed & has) - resolution.platform_roles):
        changes.append(SyncChange("remove", platform_role=role, before=role))
    return changes


def apply_sync(
    *, identity: SsoIdentity, resolution: Resolution, request_id: str = ""
) -> list[SyncChange]:
    """Apply plan_sync's changes for the identity's user, each audited, in one transaction."""
    user = identity.user
    actor = f"sso:{identity.provider}"
    with transaction.atomic():
        changes = plan_sync(user=user, identity=identity, resolution=resolution)
        lost_tenants: list[int] = []
        for change in changes:
            if change.change == "kept-manual":
                continue
            if change.platform_role:
                _apply_platform_role(user, change)
            else:
                tenant = _apply_membership(user, change, resolution)
                if change.change == "remove":
                    lost_tenants.append(tenant.pk)
            record_event(
                action="sso.sync",
                actor=actor,
                tenant=None if change.platform_role else Tenant.objects.get(slug=change.tenant),
                obj=user,
                object_id=user.username,
                before={"role": change.before} if change.before else None,
                after={"role": change.after, **change.as_dict()},
                request_id=request_id,
            )
        added = {c.platform_role for c in changes if c.platform_role and c.change == "add"}
        # A role given by hand before the mapping named it stays the hand's.
        kept = set(identity.managed_platform_roles) & resolution.platform_roles
        identity.managed_platform_roles = sorted(kept | added)
        identity.save(update_fields=["managed_platform_roles"])
        if resolution.is_empty:
            tokens_revoke_for_user(
                user=user, actor=actor, reason="sso.no_access", request_id=request_id
            )
        elif lost_tenants:
            tokens_revoke_for_user(
                user=user,
                tenant_ids=lost_tenants,
                actor=actor,
                reason="sso.membership_removed",
                request_id=request_id,
            )
    return changes


def withdraw_managed_access(*, identity: SsoIdentity, reason: str, request_id: str = "") -> None:
    """The provider no longer vouches for this person (refresh refused, back-channel logout of a
    disabled account): what the mapping gave is withdrawn until they sign in again."""
    with transaction.atomic():
        apply_sync(identity=identity, resolution=Resolution(), request_id=request_id)
        record_event(
            action="sso.access_withdrawn",
            actor=f"sso:{identity.provider}",
            obj=identity.user,
            object_id=identity.user.username,
            after={"reason": reason, "provider": identity.provider},
            request_id=request_id,
        )


def _apply_membership(user: Any, change: SyncChange, resolution: Resolution) -> Tenant:
    tenant = Tenant.objects.get(slug=change.tenant)
    if change.change == "add":
        Membership.objects.create(
            user=user, tenant=tenant, role=change.after or "", source=MembershipSource.SSO
        )
    elif change.change == "change":
        membership = Membership.objects.get(user=user, tenant=tenant, source=MembershipSource.SSO)
        membership.role = change.after or ""
        membership.save(update_fields=["role"])  # save(): the gateway hears of it
    else:
        membership = Membership.objects.get(user=user, tenant=tenant, source=MembershipSource.SSO)
        membership.delete()
    return tenant


def _apply_platform_role(user: Any, change: SyncChange) -> None:
    group = Group.objects.get_or_create(name=PlatformRole(change.platform_role).value)[0]
    if change.change == "add":
        user.groups.add(group)
    else:
        user.groups.remove(group)
