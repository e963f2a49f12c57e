"""The live charts' partials: the first paint's history read here, the rest arrives over the
metrics sockets (static/portal/live.js). The including page has already decided that its user
may see the version; the fleet's charts decide here (operators only)."""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from django import template

from portal.live_access import may_watch_fleet
from portal.live_series import fleet_history, version_history, versions_history

register = template.Library()
log = logging.getLogger(__name__)
EMPTY: dict[str, Any] = {"minutes": [], "seconds": []}  # the shape of live_series' histories


@register.inclusion_tag("portal/_live_charts.html", takes_context=True)
def version_charts(context: Any, tenant: Any, version: Any) -> dict[str, Any]:
    label = f"{version.adapter.name}@{version.number}"
    try:
        history = version_history(tenant=tenant.slug, version_label=label, now=time.time())
    except redis.RedisError as exc:  # the page still renders; the charts start empty
        log.warning("live chart history unavailable: %s", exc)
        history = EMPTY
    return {
        "show": True,
        "kind": "version",
        "select": label,
        "socket": f"/ws/tenants/{tenant.slug}/metrics/",
        "history": history,
        "history_id": f"live-{label}-history",
    }


@register.inclusion_tag("portal/_live_charts.html", takes_context=True)
def tenant_charts(context: Any, tenant: Any, adapters: Any) -> dict[str, Any]:
    """All of `adapters` (what the page shows its user of the tenant) added up."""
    from adapters.models import AdapterVersion

    labels = [
        f"{name}@{number}"
        for name, number in AdapterVersion.objects.filter(adapter__in=list(adapters)).values_list(
            "adapter__name", "number"
        )
    ]
    try:
        history = versions_history(tenant=tenant.slug, version_labels=labels, now=time.time())
    except redis.RedisError as exc:
        log.warning("live chart history unavailable: %s", exc)
        history = EMPTY
    return {
        "show": True,
        "kind": "tenant",
        "select": "",
        "socket": f"/ws/tenants/{tenant.slug}/metrics/",
        "history": history,
        "history_id": f"live-{tenant.slug}-history",
    }


@register.inclusion_tag("portal/_live_charts.html", takes_context=True)
def fleet_charts(context: Any) -> dict[str, Any]:
    request = context.get("request")
    if request is None or not may_watch_fleet(user=request.user):
        return {"show": False}
    try:
        history = fleet_history(now=time.time())
    except redis.RedisError as exc:
        log.warning("live chart history unavailable: %s", exc)
        history = EMPTY
    return {
        "show": True,
        "kind": "fleet",
        "select": "",
        "socket": "/ws/fleet/metrics/",
        "history": history,
        "history_id": "live-fleet-history",
    }
