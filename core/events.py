"""Live events over Channels: small typed dicts to per-tenant groups, sent after commit."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def tenant_group(tenant_id: int) -> str:
    return f"tenant-{tenant_id}.events"


def broadcast_after_commit(*, tenant_id: int, event: dict[str, Any]) -> None:
    """Queue `event` for the tenant's sockets once the surrounding transaction commits."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(
                tenant_group(tenant_id), {"type": "portal.event", "event": event}
            )
        except Exception:  # noqa: BLE001 - a live page missing one update must not fail the change
            log.warning(
                "could not broadcast %s to tenant %s", event.get("kind"), tenant_id, exc_info=True
            )

    transaction.on_commit(send)
