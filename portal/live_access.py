"""What a live socket may receive, and a generation that tells sockets to ask again.

The decision comes from tenants.access (AccessContext); this module only shapes it for sockets.
Re-checking the database for every socket on every 1 Hz tick would cost the fleet's sockets x 1
queries a second, so the publisher reads one Redis counter per tick (`access_generation`) and
sends it with the numbers; a socket decides again whenever the counter moved, and at least every
RECHECK_SECONDS whatever it says (a change made without signals still stops a stream in time).
The counter moves after commit on every change to memberships, adapter grants, users and their
platform groups, and on every log-out (a socket also stops with the login it was opened with).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from portal.errors import NotFound
from tenants.access import AccessContext
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


def session_alive(session: Any) -> bool:
    """A socket lives as long as the login it was opened with: after a log-out (the session is
    deleted) it stops, whatever the user may still see."""
    key = getattr(session, "session_key", None)
    return bool(key) and session.exists(key)


# --- the generation ---


def access_generation(client: Any | None = None) -> int:
    raw = (client or shared_state.client()).get(ACCESS_GENERATION_KEY)
    return int(raw or 0)


def _bump() -> None:
    try:
        shared_state.client().incr(ACCESS_GENERATION_KEY)
    except Exception:  # noqa: BLE001 - sockets still re-check every RECHECK_SECONDS
        log.warning("could not bump %s", ACCESS_GENERATION_KEY, exc_info=True)


def access_changed(**kwargs: Any) -> None:
    # A login only stamps last_login: not a change of access.
    fields = kwargs.get("update_fields")
    if fields is not None and set(fields) <= {"last_login"}:
        return
    transaction.on_commit(_bump)


def connect() -> None:
    from adapters.models import AdapterGroupObjectPermission, AdapterUserObjectPermission
    from tenants.models import Membership, Tenant

    user_model = get_user_model()
    for model in (
        Membership,
        AdapterUserObjectPermission,
        AdapterGroupObjectPermission,
        Tenant,
        user_model,
    ):
        uid = f"portal.live_access.{model._meta.label}"
        post_save.connect(access_changed, sender=model, dispatch_uid=uid + ".save")
        post_delete.connect(access_changed, sender=model, dispatch_uid=uid + ".delete")
    m2m_changed.connect(
        access_changed, sender=user_model.groups.through, dispatch_uid="portal.live_access.groups"
    )
    user_logged_out.connect(access_changed, dispatch_uid="portal.live_access.logout")
