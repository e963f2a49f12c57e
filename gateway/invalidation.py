"""Tell every gateway replica that its tables are stale: Redis counters bumped after commit, and
a message on CHANGED_CHANNEL so that replicas need not read the counters on every request.

Routes, tokens, tenants and engines share one generation; residency (written on every converge
pass) has its own, so a busy controller only makes replicas re-read the residency map. The
counters stay the truth: a replica that missed messages (its subscription dropped) compares them
on its next refresh.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from workers import shared_state

log = logging.getLogger(__name__)
ROUTES_KEY = "lp:gw:gen"
RESIDENCY_KEY = "lp:gw:resgen"
# Scoped to the Redis database: pub/sub channels are shared by every database on the server.
CHANGED_CHANNEL = f"lp:gw:changed:{settings.REDIS_PUBSUB_SCOPE}"


def announce(key: str) -> None:
    """Bump one generation and tell the replicas, in one round trip."""
    try:
        pipe = shared_state.client().pipeline(transaction=False)
        pipe.incr(key)
        pipe.publish(CHANGED_CHANNEL, key)
        pipe.execute()
    except Exception:  # noqa: BLE001 - replicas re-read on their own period anyway
        log.warning("could not announce %s", key, exc_info=True)


def _bump(key: str) -> None:
    transaction.on_commit(lambda: announce(key))


def routes_changed(**_: Any) -> None:
    _bump(ROUTES_KEY)


def residency_changed(**_: Any) -> None:
    _bump(RESIDENCY_KEY)


def user_changed(update_fields: Any = None, **_: Any) -> None:
    """A user deactivated (or deleted) loses their tokens and playground at once: the tables
    hold only active users' callers and roles. A login only stamps last_login: no change."""
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return
    _bump(ROUTES_KEY)


def connect() -> None:
    from adapters.models import Adapter, AdapterVersion, Alias, AliasTarget, BaseModel
    from budgets.models import Budget, BudgetRaiseRequest, PriceCard
    from tenants.models import ApiToken, Membership, ServiceClass, Tenant
    from workers.models import Engine, Residency

    for model in (
        Adapter,
        AdapterVersion,
        Alias,
        AliasTarget,
        BaseModel,
        ApiToken,
        Membership,
        Tenant,
        ServiceClass,  # the classes' plans (gateway.class_policy)
        Engine,
        Budget,
        BudgetRaiseRequest,  # an approved raise for the rest of a window
        PriceCard,
    ):
        uid = f"gateway.routes.{model._meta.label}"
        post_save.connect(routes_changed, sender=model, dispatch_uid=uid + ".save")
        post_delete.connect(routes_changed, sender=model, dispatch_uid=uid + ".delete")
    user_model = get_user_model()
    post_save.connect(user_changed, sender=user_model, dispatch_uid="gateway.routes.user.save")
    post_delete.connect(user_changed, sender=user_model, dispatch_uid="gateway.routes.user.delete")
    post_save.connect(residency_changed, sender=Residency, dispatch_uid="gateway.residency.save")
    post_delete.connect(
        residency_changed, sender=Residency, dispatch_uid="gateway.residency.delete"
    )
