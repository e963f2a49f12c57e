"""Writing the hash-chained audit log (verifying it: portal.audit_verify).

Each event's hash is an HMAC, keyed with AUDIT_CHAIN_KEY (a secret that is not in the database),
over its content and the previous event's hash, so changing, removing or reordering any row
breaks the chain from that row on, and someone who can write the database but lacks the key
cannot recompute it. Cutting off the newest events is caught by the checkpoints kept in the
object store (portal.audit_checkpoint). Writers lock the chain head row, which serialises appends
without locking the whole table.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from core.audit_models import AuditChainHead, AuditEvent

GENESIS_HASH = "0" * 64


def _normalise(value: Any) -> Any:
    """What a JSONField gives back after a round trip, so the hash is computed on stored data."""
    if value is None:
        return None
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def event_content(event: AuditEvent) -> dict[str, Any]:
    """What an event's hash covers, as plain JSON (also what exports and records carry)."""
    return {
        "created_at": event.created_at.astimezone(UTC).isoformat(timespec="microseconds"),
        "actor": event.actor_label,
        "actor_id": event.actor_id,
        "tenant": event.tenant_label,
        "tenant_id": event.tenant_id,
        "action": event.action,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "before": event.before,
        "after": event.after,
        "request_id": event.request_id,
    }


_content = event_content  # the name portal's migration 0003 imports


def event_from_content(content: dict[str, Any], *, prev_hash: str) -> AuditEvent:
    """An unsaved event rebuilt from event_content's dict, to recompute its hash."""
    return AuditEvent(
        created_at=datetime.fromisoformat(content["created_at"]),
        actor_label=content["actor"],
        actor_id=content["actor_id"],
        tenant_label=content["tenant"],
        tenant_id=content["tenant_id"],
        action=content["action"],
        object_type=content["object_type"],
        object_id=content["object_id"],
        before=content["before"],
        after=content["after"],
        request_id=content["request_id"],
        prev_hash=prev_hash,
    )


def chain_key() -> bytes:
    from django.conf import settings

    return settings.AUDIT_CHAIN_KEY.encode()


def compute_hash(prev_hash: str, event: AuditEvent, *, key: bytes | None = None) -> str:
    payload = json.dumps(
        event_content(event), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    message = f"{prev_hash}\n{payload}".encode()
    return hmac.new(chain_key() if key is None else key, message, hashlib.sha256).hexdigest()


def _locked_head() -> AuditChainHead:
    head = AuditChainHead.objects.select_for_update().filter(pk=1).first()
    if head is not None:
        return head
    try:
        with transaction.atomic():
            AuditChainHead.objects.create(pk=1, last_hash=GENESIS_HASH)
    except IntegrityError:
        pass  # another writer created it first
    return AuditChainHead.objects.select_for_update().get(pk=1)


def record_event(
    *,
    action: str,
    actor: Any = None,
    tenant: Any = None,
    obj: models.Model | None = None,
    object_type: str = "",
    object_id: str = "",
    before: Any = None,
    after: Any = None,
    request_id: str = "",
) -> AuditEvent:
    """Append one event. Call it inside the transaction of the change it records."""
    if obj is not None:
        object_type = object_type or obj._meta.label_lower
        object_id = object_id or str(obj.pk)
    actor_obj = actor if getattr(actor, "is_authenticated", False) else None
    with transaction.atomic():
        head = _locked_head()
        event = AuditEvent(
            created_at=timezone.now(),
            actor=actor_obj,
            actor_label=actor_obj.get_username()
            if actor_obj
            else (actor if isinstance(actor, str) else "system"),
            tenant=tenant,
            tenant_label=getattr(tenant, "slug", "") or "",
            action=action,
            object_type=object_type,
            object_id=str(object_id),
            before=_normalise(before),
            after=_normalise(after),
            request_id=request_id,
            prev_hash=head.last_hash,
        )
        event.hash = compute_hash(head.last_hash, event)
        event.save(force_insert=True)
        head.last_hash = event.hash
        head.last_event_id = event.pk
        head.save(update_fields=["last_hash", "last_event_id"])
    return event
