"""Verifying the audit chain: every link and hash in id order, and that the chain still reaches
the newest checkpoint kept outside the database (portal.audit_checkpoint). The chain itself is
written by core.audit; verifying it is the site's (pages, API, a management command)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.audit import GENESIS_HASH, chain_key, compute_hash
from core.audit_models import AuditChainHead, AuditEvent
from portal.audit_checkpoint import CheckpointError, read_checkpoint


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    checked: int
    first_broken_id: int | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "first_broken_id": self.first_broken_id,
            "reason": self.reason,
        }


def verify_chain(*, batch_size: int = 2000) -> ChainReport:
    """Walk the chain in id order and name the first event whose link or content is wrong;
    then check that the chain still reaches the newest checkpoint kept outside the database."""
    try:
        checkpoint = read_checkpoint()
    except CheckpointError as exc:
        return ChainReport(False, 0, None, exc.message)
    key = chain_key()
    reached_checkpoint = checkpoint is None
    prev_hash = GENESIS_HASH
    checked = 0
    last_id = 0
    while True:
        batch = list(AuditEvent.objects.filter(pk__gt=last_id).order_by("pk")[:batch_size])
        if not batch:
            break
        for event in batch:
            if event.prev_hash != prev_hash:
                return ChainReport(
                    False,
                    checked,
                    event.pk,
                    "prev_hash does not match the previous event (an event was removed or reordered)",
                )
            if compute_hash(prev_hash, event, key=key) != event.hash:
                return ChainReport(
                    False,
                    checked,
                    event.pk,
                    "content does not match its hash (the event was changed)",
                )
            if checkpoint is not None and event.pk == checkpoint.event_id:
                if event.hash != checkpoint.hash:
                    return ChainReport(
                        False,
                        checked,
                        event.pk,
                        "the event differs from the checkpoint in the object store",
                    )
                reached_checkpoint = True
            prev_hash = event.hash
            checked += 1
            last_id = event.pk
    if not reached_checkpoint:
        assert checkpoint is not None
        return ChainReport(
            False,
            checked,
            checkpoint.event_id,
            f"events up to #{checkpoint.event_id} were checkpointed in the object store at "
            f"{checkpoint.created_at}, but the chain ends before it (events were removed)",
        )
    head = AuditChainHead.objects.filter(pk=1).first()
    if head is not None and head.last_hash != prev_hash:
        return ChainReport(
            False,
            checked,
            head.last_event_id or None,
            "the newest events are missing (the chain head points past the last event)",
        )
    return ChainReport(True, checked)
