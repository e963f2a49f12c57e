"""Looking behind the storage API: what is physically stored, and which S3 calls were made."""

from __future__ import annotations

import os
from typing import Any

from adapters.storage import AdapterStorage, LocalDiskStorage


def leftovers(storage: AdapterStorage) -> list[str]:
    """Everything in the store: files and folders on disk (temp files included); objects and
    pending multipart uploads in the bucket."""
    if isinstance(storage, LocalDiskStorage):
        found = []
        for dirpath, dirnames, filenames in os.walk(storage.root):
            for name in dirnames + filenames:
                found.append(os.path.relpath(os.path.join(dirpath, name), storage.root))
        return sorted(found)
    client: Any = storage.client  # type: ignore[attr-defined]
    bucket = storage.bucket  # type: ignore[attr-defined]
    found = [item["Key"] for item in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    found += [f"pending upload: {upload['Key']}" for upload in uploads]
    return sorted(found)


class S3Calls:
    """Names of the S3 operations a client makes, seen through botocore's event hooks."""

    def __init__(self, client: Any):
        self.names: list[str] = []
        client.meta.events.register("before-call.s3.*", self._record)

    def _record(self, model: Any, **_: Any) -> None:
        self.names.append(model.name)

    def count(self, name: str) -> int:
        return self.names.count(name)
