"""Writes for tenants, memberships, platform roles and per-adapter grants. Every change is audited.

One convention (as the lifecycle services): the caller's AccessContext comes in, and who may make
the change is asked inside (adapters/access.py, through tenants/access_port.py), so no caller
can forget it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from guardian.shortcuts import assign_perm, remove_perm

from core.audit import record_event
from core.errors import ApplicationError, Conflict, NotFound, clean_or_raise
from tenants.models import Membership, PlatformRole, SloClass, Tenant, TenantRole
from tenants.plan import EVAL_BOUNDS, REQUEST_BOUNDS

User = get_user_model()

TENANT_FIELDS = (
    "name",
    "slo_class",
    "quota_adapters",
    "quota_storage_bytes",
    "quota_pinned_slots",
    "quota_requests_per_minute",
    "require_signatures",
    "pool",
    "quota_warm_slots",
    "max_adapter_concurrency",
    *REQUEST_BOUNDS,
    *EVAL_BOUNDS,
)
GRANTABLE_ADAPTER_PERMS = ("view_adapter", "change_adapter", "upload_version")


def _snapshot(obj: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in fields}


def _platform_admin(access: Any) -> Any:
    """The actor of a platform change (tenants, users, platform roles): a platform admin."""
    access.require_platform_role("is_platform_admin")
    return access.user


def tenant_create(
    *, access: Any, slug: str, name: str, request_id: str = "", **fields: Any
) -> Tenant:
    actor = _platform_admin(access)
    unknown = set(fields) - set(TENANT_FIELDS)
    if unknown:
        raise ApplicationError(
            "tenant.unknown_field", f"Unknown tenant field(s): {', '.join(sorted(unknown))}."
        )
    tenant = Tenant(slug=slug, name=name, **fields)
    clean_or_raise(tenant, validate_unique=False)
    try:
        with transaction.atomic():
            tenant.save()
            record_event(
                action="tenant.create",
                actor=actor,
                tenant=tenant,
                obj=tenant,
                after={"slug": slug, **_snapshot(tenant, TENANT_FIELDS)},
                request_id=request_id,
            )
    except IntegrityError:
        raise Conflict("tenant.exists", f"A tenant with slug '{slug}' already exists.") from None
    return tenant


def tenant_update(*, access: Any, tenant: Tenant, request_id: str = "", **changes: Any) -> Tenant:
    actor = _platform_admin(access)
    unknown = set(changes) - set(TENANT_FIELDS)
    if unknown:
        raise ApplicationError(
            "tenant.unknown_field", f"Unknown tenant field(s): {', '.join(sorted(unknown))}."
        )
    if "slo_class" in changes and changes["slo_class"] not in SloClass.values:
        raise ApplicationError(
            "tenant.bad_slo_class", f"slo_class must be one of {', '.join(SloClass.values)}."
        )
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        before = _snapshot(locked, tuple(changes))
        for key, value in changes.items():
            setattr(locked, key, value)
        clean_or_raise(locked, validate_unique=False)
        locked.save()
        record_event(
            action="tenant.update",
            actor=actor,
            tenant=locked,
            obj=locked,
            before=before,
            after=_snapshot(locked, tuple(changes)),
            request_id=request_id,
        )
    return locked


def membership_set(
    *, access: Any, tenant: Tenant, username: str, role: str, request_id: str = ""
) -> Membership:
    access.require_tenant(tenant, "manage_members")
    actor = access.user
    if role not in TenantRole.values:
        raise ApplicationError(
            "membership.bad_role", f"role must be one of {', '.join(TenantRole.values)}."
        )
    user = User.objects.filter(username=username, is_active=True).first()
    if user is None:
        raise NotFound("user.not_found", f"No active user '{username}'.")
    with transaction.atomic():
        membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
        before = {"role": membership.role} if membership else None
        if membership is None:
            membership = Membership.objects.create(tenant=tenant, user=user, role=role)
        else:
            _guard_last_owner(tenant, membership, new_role=role)
            membership.role = role
            membership.save(update_fields=["role"])
        record_event(
            action="membership.set",
            actor=actor,
            tenant=tenant,
            obj=membership,
            object_id=f"{tenant.slug}:{username}",
            before=before,
            after={"role": role},
            request_id=request_id,
        )
    return membership


def membership_remove(*, access: Any, membership: Membership, request_id: str = "") -> None:
    access.require_tenant(membership.tenant, "manage_members")
    actor = access.user
    with transaction.atomic():
        locked = (
            Membership.objects.select_for_update()
            .select_related("tenant", "user")
            .get(pk=membership.pk)
        )
        _guard_last_owner(locked.tenant, locked, new_role=None)
        record_event(
            action="membership.remove",
            actor=actor,
            tenant=locked.tenant,
            obj=locked,
            object_id=f"{locked.tenant.slug}:{locked.user.username}",
            before={"role": locked.role},
            after=None,
            request_id=request_id,
        )
        locked.delete()


def _guard_last_owner(tenant: Tenant, membership: Membership, *, new_role: str | None) -> None:
    """A tenant never loses its last owner: nobody could manage it any more."""
    if membership.role != TenantRole.OWNER or new_role == TenantRole.OWNER:
        return
    owners = Membership.objects.filter(tenant=tenant, role=TenantRole.OWNER).exclude(
        pk=membership.pk
    )
    if not owners.exists():
        raise Conflict(
            "membership.last_owner",
            f"'{membership.user.username}' is the last owner of '{tenant.slug}'; add another owner first.",
        )


def platform_roles_set(
    *, access: Any, user: Any, roles: list[str], request_id: str = ""
) -> list[str]:
    actor = _platform_admin(access)
    unknown = set(roles) - set(PlatformRole.values)
    if unknown:
        raise ApplicationError(
            "user.bad_platform_role",
            f"Unknown platform role(s): {', '.join(sorted(unknown))}; valid: {', '.join(PlatformRole.values)}.",
        )
    with transaction.atomic():
        before = sorted(
            user.groups.filter(name__in=PlatformRole.values).values_list("name", flat=True)
        )
        keep = user.groups.exclude(name__in=PlatformRole.values)
        user.groups.set([*keep, *Group.objects.filter(name__in=roles)])
        after = sorted(set(roles))
        record_event(
            action="user.platform_roles",
            actor=actor,
            obj=user,
            object_id=user.username,
            before={"roles": before},
            after={"roles": after},
            request_id=request_id,
        )
    return after


def user_create(
    *,
    access: Any,
    username: str,
    password: str,
    email: str = "",
    roles: list[str] | None = None,
    request_id: str = "",
) -> Any:
    from django.contrib.auth.password_validation import validate_password

    actor = _platform_admin(access)
    if User.objects.filter(username=username).exists():
        raise Conflict("user.exists", f"A user named '{username}' already exists.")
    user = User(username=username, email=email)
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise ApplicationError("user.weak_password", " ".join(exc.messages)) from None
    clean_or_raise(user, exclude=["password"], validate_unique=False)
    with transaction.atomic():
        user.set_password(password)
        user.save()
        record_event(
            action="user.create",
            actor=actor,
            obj=user,
            object_id=username,
            after={"username": username, "email": email},
            request_id=request_id,
        )
        if roles:
            platform_roles_set(access=access, user=user, roles=roles, request_id=request_id)
    return user


def user_update(
    *,
    access: Any,
    user: Any,
    platform_roles: list[str] | None = None,
    is_active: bool | None = None,
    request_id: str = "",
) -> Any:
    """A platform admin changes a user's platform roles and/or whether they may log in; one
    transaction, each change audited. Nobody deactivates themselves (they could not undo it)."""
    actor = _platform_admin(access)
    with transaction.atomic():
        if platform_roles is not None:
            platform_roles_set(
                access=access, user=user, roles=platform_roles, request_id=request_id
            )
        if is_active is not None and is_active != user.is_active:
            if user.pk == actor.pk:
                raise ApplicationError("user.self_deactivate", "You cannot deactivate yourself.")
            record_event(
                action="user.set_active",
                actor=actor,
                obj=user,
                object_id=user.username,
                before={"is_active": user.is_active},
                after={"is_active": is_active},
                request_id=request_id,
            )
            user.is_active = is_active
            user.save(update_fields=["is_active"])
    return user


def adapter_grant(
    *, access: Any, adapter: Any, username: str, perms: list[str], request_id: str = ""
) -> list[str]:
    """Give one user rights on one adapter only (a guardian object permission)."""
    access.require_tenant(adapter.tenant, "manage_members")
    actor = access.user
    unknown = set(perms) - set(GRANTABLE_ADAPTER_PERMS)
    if unknown or not perms:
        raise ApplicationError(
            "grant.bad_permission", f"Grant one or more of: {', '.join(GRANTABLE_ADAPTER_PERMS)}."
        )
    user = User.objects.filter(username=username, is_active=True).first()
    if user is None:
        raise NotFound("user.not_found", f"No active user '{username}'.")
    # Any right on the adapter implies seeing it.
    granted = sorted(set(perms) | {"view_adapter"})
    with transaction.atomic():
        for perm in granted:
            assign_perm(perm, user, adapter)
        record_event(
            action="adapter.grant",
            actor=actor,
            tenant=adapter.tenant,
            obj=adapter,
            after={"user": username, "perms": granted},
            request_id=request_id,
        )
    return granted


def adapter_revoke_grants(
    *, access: Any, adapter: Any, username: str, request_id: str = ""
) -> None:
    access.require_tenant(adapter.tenant, "manage_members")
    actor = access.user
    user = User.objects.filter(username=username).first()
    if user is None:
        raise NotFound("user.not_found", f"No user '{username}'.")
    with transaction.atomic():
        for perm in GRANTABLE_ADAPTER_PERMS:
            remove_perm(perm, user, adapter)
        record_event(
            action="adapter.revoke",
            actor=actor,
            tenant=adapter.tenant,
            obj=adapter,
            before={"user": username},
            request_id=request_id,
        )
