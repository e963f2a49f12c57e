"""What a live socket may receive, and generations that tell sockets to ask again.

The decision comes from adapters.access (AccessContext); this module only shapes it for sockets.
Re-checking the database for every socket on every 1 Hz tick would cost the fleet's sockets x 1
queries a second, so the publisher reads the access generations with its tick (one pipelined
Redis round trip) and sends them with the numbers; a socket decides again whenever its
generation moved (before passing the message on), and at least every RECHECK_SECONDS whatever
it says, so that a change made without signals still stops a stream in time. That periodic
re-check runs beside the stream (the message in hand goes out; a refusal stops the next one),
each socket at its own phase of the period so that sockets opened together do not all ask in
the same second.

A generation is "<global>.<tenant>": a change that concerns one tenant (a membership, a grant on
one of its adapters, the tenant itself, the log-out of a user who belongs to it) moves only that
tenant's counter, so the sockets of every other tenant keep streaming without a database
round trip; changes to users and platform groups, which may reach any tenant, move the global
one. Counters move after commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from adapters.access import AccessContext
from core.errors import NotFound
from workers import shared_state

log = logging.getLogger(__name__)
ACCESS_GENERATION_KEY = "lp:live:access-gen"
RECHECK_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class LiveScope:
    """One socket's reach in one tenant: every adapter (members, and platform roles that may
    view tenants), or only the adapters granted to the user one by one."""

    tenant_id: int
    tenant: str  # slug, as the gateway's series key it
    adapters: frozenset[str] | None  # None: all of the tenant's adapters

    def allows(self, adapter: str) -> bool:
        return self.adapters is None or adapter in self.adapters


def tenant_scope(*, user: Any, tenant: str) -> LiveScope | None:
    """None when the user may see nothing of the tenant (the socket is refused or closed).
    The user is read afresh (the socket's scope holds the one from connect)."""
    access = AccessContext.current(user)
    if access is None:
        return None
    try:
        found = access.get_tenant(tenant)
    except NotFound:
        return None
    names = access.adapter_reach(found)
    if names is not None and not names:
        return None
    return LiveScope(tenant_id=found.id, tenant=found.slug, adapters=names)


def may_watch_fleet(*, user: Any) -> bool:
    """The fleet-wide numbers (all tenants added up) are for those who see engines."""
    access = AccessContext.current(user)
    return access is not None and access.sees_engines


# --- the generations ---

TENANT_GENERATIONS_KEY = "lp:live:access-gen:tenant"  # hash: tenant slug -> counter


def generation_of(global_gen: Any, tenant_gen: Any = None) -> str:
    """The generation a socket compares: the global counter and its tenant's (fleet: none)."""
    return f"{int(global_gen or 0)}.{int(tenant_gen or 0)}"


def access_generation(client: Any | None = None, *, tenant: str | None = None) -> str:
    redis = client or shared_state.client()
    if tenant is None:
        return generation_of(redis.get(ACCESS_GENERATION_KEY))
    pipe = redis.pipeline(transaction=False)
    pipe.get(ACCESS_GENERATION_KEY)
    pipe.hget(TENANT_GENERATIONS_KEY, tenant)
    return generation_of(*pipe.execute())


def _bump(tenants: frozenset[str] | None) -> None:
    """None: every socket asks again; else only the sockets of these tenants."""
    try:
        redis = shared_state.client()
        if tenants is None:
            redis.incr(ACCESS_GENERATION_KEY)
            return
        pipe = redis.pipeline(transaction=False)
        for slug in tenants:
            pipe.hincrby(TENANT_GENERATIONS_KEY, slug, 1)
        pipe.execute()
    except Exception:  # noqa: BLE001 - sockets still re-check every RECHECK_SECONDS
        log.warning("could not bump the live access generation", exc_info=True)


def _bump_after_commit(tenants: frozenset[str] | None) -> None:
    transaction.on_commit(lambda: _bump(tenants))


def _tenants_of_user(user: Any) -> frozenset[str] | None:
    """The tenants whose sockets a change to `user` may concern: those they belong to or hold a
    grant in; None (all) for users with platform roles, who may watch any tenant."""
    from adapters.models import AdapterUserObjectPermission
    from tenants.models import Membership

    if user is None or user.pk is None:
        return frozenset()
    # Groups: platform roles (which watch any tenant) and group grants; a superuser is a
    # platform admin (adapters/access.py).
    if user.groups.exists() or AccessContext.for_user(user).is_platform_admin:
        return None
    members = Membership.objects.filter(user=user).values_list("tenant__slug", flat=True)
    granted = AdapterUserObjectPermission.objects.filter(user=user).values_list(
        "content_object__tenant__slug", flat=True
    )
    return frozenset(members) | frozenset(granted)


def _tenant_of_grant(instance: Any) -> frozenset[str] | None:
    from adapters.models import Adapter

    slug = (
        Adapter.objects.filter(pk=instance.content_object_id)
        .values_list("tenant__slug", flat=True)
        .first()
    )
    return frozenset({slug}) if slug else None


def membership_changed(instance: Any, **kwargs: Any) -> None:
    try:
        slug = instance.tenant.slug
    except ObjectDoesNotExist:  # the tenant itself is being deleted: tenant_changed bumps it
        slug = None
    _bump_after_commit(frozenset({slug}) if slug else None)


def grant_changed(instance: Any, **kwargs: Any) -> None:
    _bump_after_commit(_tenant_of_grant(instance))


def tenant_changed(instance: Any, **kwargs: Any) -> None:
    _bump_after_commit(frozenset({instance.slug}))


def user_changed(**kwargs: Any) -> None:
    # A login only stamps last_login: not a change of access.
    fields = kwargs.get("update_fields")
    if fields is not None and set(fields) <= {"last_login"}:
        return
    _bump_after_commit(None)


def logged_out(user: Any = None, **kwargs: Any) -> None:
    # Read now: after commit the user's rows may be gone (a log-out before a deletion).
    _bump_after_commit(_tenants_of_user(user))


def connect() -> None:
    from adapters.models import AdapterGroupObjectPermission, AdapterUserObjectPermission
    from tenants.models import Membership, Tenant

    user_model = get_user_model()
    handlers = (
        (Membership, membership_changed),
        (AdapterUserObjectPermission, grant_changed),
        (AdapterGroupObjectPermission, grant_changed),
        (Tenant, tenant_changed),
        (user_model, user_changed),
    )
    for model, handler in handlers:
        uid = f"portal.live_access.{model._meta.label}"
        post_save.connect(handler, sender=model, dispatch_uid=uid + ".save")
        post_delete.connect(handler, sender=model, dispatch_uid=uid + ".delete")
    m2m_changed.connect(
        user_changed, sender=user_model.groups.through, dispatch_uid="portal.live_access.groups"
    )
    user_logged_out.connect(logged_out, dispatch_uid="portal.live_access.logout")
