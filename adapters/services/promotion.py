"""Promotion of validated files from quarantine to the content-addressed serving area."""

from __future__ import annotations

from adapters.models import AdapterVersion
from adapters.storage import get_storage, serving_key
from adapters.tracing import traced_step


@traced_step("promote")
def promote_to_serving(version: AdapterVersion) -> dict[str, str]:
    """Copy each file to `serving/<sha256>/<name>` and verify it; safe to repeat."""
    storage = get_storage()
    keys: dict[str, str] = {}
    for entry in version.manifest:
        name, sha256, size = entry["name"], entry["sha256"], entry["size"]
        target = serving_key(sha256, name)
        if not storage.exists(target):
            storage.copy(version.quarantine_keys[name], target)
        storage.verify_object(target, size, sha256)
        keys[name] = target
    return keys
