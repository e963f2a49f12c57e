"""The storage interface every backend implements, and the value types it returns."""

from __future__ import annotations

import builtins
import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from .errors import IntegrityMismatch
from .keys import normalize_prefixes, validate_key, validate_prefix
from .streams import CHUNK_SIZE, Readable, read_stored, write_atomically


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    sha256: str


@dataclass(frozen=True)
class CompletedPart:
    part_number: int
    etag: str


@dataclass(frozen=True)
class PendingUpload:
    key: str
    upload_id: str
    initiated: datetime | None


class AdapterStorage(ABC):
    """Adapter files in one store. Keys come from `keys.quarantine_key` / `keys.serving_key`.

    Every method validates its key (or prefix) and raises `BadKey` before touching the backend.
    Writes are all-or-nothing: after any failure no object, temp file or pending upload remains.
    """

    def __init__(self, allowed_prefixes: tuple[str, ...] | builtins.list[str]):
        self.allowed_prefixes = normalize_prefixes(allowed_prefixes)

    def check_key(self, key: object) -> str:
        return validate_key(key, self.allowed_prefixes)

    def check_prefix(self, prefix: object, *, min_depth: int = 1) -> str:
        return validate_prefix(prefix, self.allowed_prefixes, min_depth=min_depth)

    @abstractmethod
    def save_stream(self, key: str, fileobj: Readable, *, max_bytes: int) -> StoredObject:
        """Store the stream, read in 1 MiB chunks and hashed while written; replaces any old object.

        Raises TooLarge (over `max_bytes`), SourceFailed (the stream broke), BackendError.
        """

    @abstractmethod
    def open(self, key: str) -> BinaryIO:
        """A binary file object for a streaming read; the caller closes it. NotFound if absent."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def size(self, key: str) -> int:
        """Size in bytes; NotFound if absent."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; deleting an absent object is not an error."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under `prefix` (at least two segments deep); returns how many."""

    @abstractmethod
    def copy(self, src_key: str, dst_key: str) -> None:
        """Copy inside the store (server-side on S3); the copy appears whole or not at all."""

    @abstractmethod
    def list(self, prefix: str) -> builtins.list[str]:
        """Keys under `prefix`, sorted."""

    def verify_object(self, key: str, expected_size: int, expected_sha256: str) -> StoredObject:
        """Re-read the object and check its size and sha256; IntegrityMismatch if either differs.

        The object is left in place: what to do with a bad object is the caller's decision.
        """
        self.check_key(key)
        actual_size = self.size(key)
        if actual_size != expected_size:
            raise IntegrityMismatch(
                f"{key} has {actual_size} bytes, expected {expected_size}",
                code="storage.size_mismatch",
            )
        hasher = hashlib.sha256()
        read = 0
        with self.open(key) as stream:
            for chunk in read_stored(stream, hasher, CHUNK_SIZE):
                read += len(chunk)
        digest = hasher.hexdigest()
        if read != expected_size:
            # The object changed between the size check and the read.
            raise IntegrityMismatch(
                f"{key} read {read} bytes, expected {expected_size}", code="storage.size_mismatch"
            )
        if digest != expected_sha256:
            raise IntegrityMismatch(
                f"{key} has sha256 {digest}, expected {expected_sha256}",
                code="storage.sha256_mismatch",
            )
        return StoredObject(key=key, size=read, sha256=digest)

    def download_to(
        self, key: str, local_path: str | os.PathLike[str], *, expected_sha256: str | None = None
    ) -> StoredObject:
        """Stream the object to a local file (atomically), hashing on the way.

        `local_path` is a node path built by the worker, not a storage key. With `expected_sha256`
        a mismatch raises IntegrityMismatch and leaves no file.
        """
        self.check_key(key)
        target = Path(local_path)
        hasher = hashlib.sha256()

        def chunks_then_check(stream: BinaryIO) -> Iterator[bytes]:
            yield from read_stored(stream, hasher)
            # Checked before the rename, so a wrong file never appears at `local_path`.
            if expected_sha256 is not None and hasher.hexdigest() != expected_sha256:
                raise IntegrityMismatch(
                    f"{key} has sha256 {hasher.hexdigest()}, expected {expected_sha256}",
                    code="storage.sha256_mismatch",
                )

        with self.open(key) as stream:
            target.parent.mkdir(parents=True, exist_ok=True)
            size = write_atomically(target, chunks_then_check(stream), mode=0o644)
        return StoredObject(key=key, size=size, sha256=hasher.hexdigest())


@runtime_checkable
class DirectMultipartStorage(Protocol):
    """Backends that let a client upload parts straight to the store through presigned URLs.

    Flow: create_multipart -> presign_part per part -> client PUTs parts, keeps each ETag ->
    complete_multipart -> verify_object (delete the object if it fails); abort_multipart to give up.
    """

    def create_multipart(self, key: str) -> str: ...

    def presign_part(
        self,
        key: str,
        upload_id: str,
        part_number: int,
        expires: int,
        *,
        content_length: int | None = None,
    ) -> str: ...

    def complete_multipart(
        self, key: str, upload_id: str, parts: builtins.list[CompletedPart]
    ) -> int: ...

    def abort_multipart(self, key: str, upload_id: str) -> None: ...

    def list_multipart_uploads(self, prefix: str) -> builtins.list[PendingUpload]: ...

    def verify_object(self, key: str, expected_size: int, expected_sha256: str) -> StoredObject: ...
