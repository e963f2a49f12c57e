"""Tell every gateway replica that its tables are stale: Redis counters bumped after commit.

Routes, tokens, tenants and engines share one generation; residency (written on every converge
pass) has its own, so a busy controller only makes replicas re-read the residency map.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save

from workers import shared_state

log = logging.getLogger(__name__)
ROUTES_KEY = "lp:gw:gen"
RESIDENCY_KEY = "lp:gw:resgen"


def _bump(key: str) -> None:
    def go() -> None:
        try:
            shared_state.client().incr(key)
        except Exception:  # noqa: BLE001 - replicas re-read on their own period anyway
            log.warning("could not bump %s", key, exc_info=True)

    transaction.on_commit(go)


def routes_changed(**_: Any) -> None:
    _bump(ROUTES_KEY)


def residency_changed(**_: Any) -> None:
    _bump(RESIDENCY_KEY)


def connect() -> None:
    from adapters.models import Adapter, AdapterVersion, Alias, AliasTarget, BaseModel
    from tenants.models import ApiToken, Membership, Tenant
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
        Engine,
    ):
        uid = f"gateway.routes.{model._meta.label}"
        post_save.connect(routes_changed, sender=model, dispatch_uid=uid + ".save")
        post_delete.connect(routes_changed, sender=model, dispatch_uid=uid + ".delete")
    post_save.connect(residency_changed, sender=Residency, dispatch_uid="gateway.residency.save")
    post_delete.connect(
        residency_changed, sender=Residency, dispatch_uid="gateway.residency.delete"
    )
