"""Checkpoints of the audit chain kept in the object store, outside the database.

The HMAC chain (core.audit) shows any changed row, but cutting off the newest events leaves a
shorter chain that is still consistent. So every AUDIT_CHECKPOINT_SECONDS beat writes the chain
head (event id and hash) to the object store, MAC'd with the chain key; verification then demands
that the chain still reaches the checkpointed event with the same hash. A checkpoint is never
moved backwards: a head behind it is a truncation, reported and left for a person to look at.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import logging
from dataclasses import dataclass

from django.utils import timezone

from adapters.storage.errors import NotFound, StorageError
from adapters.storage.factory import get_storage
from core.audit_models import AuditChainHead, AuditEvent

CHECKPOINT_KEY = "audit/checkpoint.json"
MAX_CHECKPOINT_BYTES = 4096
log = logging.getLogger(__name__)


class CheckpointError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Checkpoint:
    event_id: int
    hash: str
    created_at: str

    def _mac(self) -> str:
        from core.audit import chain_key

        body = f"{self.event_id}\n{self.hash}\n{self.created_at}".encode()
        return hmac.new(chain_key(), b"checkpoint\n" + body, hashlib.sha256).hexdigest()

    def to_bytes(self) -> bytes:
        body = {"event_id": self.event_id, "hash": self.hash, "created_at": self.created_at}
        return json.dumps({**body, "mac": self._mac()}).encode()


def read_checkpoint() -> Checkpoint | None:
    """The newest checkpoint, None if none was written yet; CheckpointError if it is not genuine."""
    try:
        with get_storage().open(CHECKPOINT_KEY) as stored:
            raw = stored.read(MAX_CHECKPOINT_BYTES + 1)
    except NotFound:
        return None
    except StorageError as exc:
        raise CheckpointError(
            "audit.checkpoint_unreadable", f"the audit checkpoint cannot be read: {exc}"
        ) from None
    try:
        data = json.loads(raw)
        checkpoint = Checkpoint(int(data["event_id"]), str(data["hash"]), str(data["created_at"]))
        genuine = hmac.compare_digest(checkpoint._mac(), str(data["mac"]))
    except (ValueError, KeyError, TypeError):
        genuine = False
    if len(raw) > MAX_CHECKPOINT_BYTES or not genuine:
        raise CheckpointError(
            "audit.checkpoint_forged",
            "the audit checkpoint in the object store was not written with this chain key",
        )
    return checkpoint


def write_checkpoint() -> Checkpoint | None:
    """Checkpoint the chain head; refuse (CheckpointError) if the head is behind the last one."""
    head = AuditChainHead.objects.filter(pk=1).first()
    if head is None or not head.last_event_id:
        return None
    previous = read_checkpoint()
    if previous is not None and head.last_event_id < previous.event_id:
        raise CheckpointError(
            "audit.chain_truncated",
            f"the audit chain head (#{head.last_event_id}) is behind the checkpoint "
            f"(#{previous.event_id}): events were removed; the checkpoint is kept",
        )
    if previous is not None and previous.event_id == head.last_event_id:
        return previous
    if (
        previous is not None
        and not AuditEvent.objects.filter(pk=previous.event_id, hash=previous.hash).exists()
    ):
        # Events appended after a truncation must not carry the checkpoint past the gap.
        raise CheckpointError(
            "audit.chain_truncated",
            f"the checkpointed audit event #{previous.event_id} is gone or changed; "
            "the checkpoint is kept",
        )
    checkpoint = Checkpoint(head.last_event_id, head.last_hash, timezone.now().isoformat())
    payload = checkpoint.to_bytes()
    get_storage().save_stream(CHECKPOINT_KEY, io.BytesIO(payload), max_bytes=MAX_CHECKPOINT_BYTES)
    return checkpoint
