"""Storage errors: one base type with a stable code, so callers and the API can report them."""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage failure: `code` is stable; `retryable`: may a retry help."""

    code = "storage.error"
    retryable = False

    def __init__(self, message: str, *, code: str | None = None, retryable: bool | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class BadKey(StorageError):
    """A key (or prefix) that the portal would never build; refused before any backend call."""

    code = "storage.bad_key"


class TooLarge(StorageError):
    """The stream exceeded `max_bytes`; nothing was kept."""

    code = "storage.too_large"


class SourceFailed(StorageError):
    """Reading the caller's stream failed midway (client went away, bad file); nothing was kept."""

    code = "storage.source_failed"


class NotFound(StorageError):
    code = "storage.not_found"


class IntegrityMismatch(StorageError):
    """Stored bytes differ from what was expected; `code` is `storage.size_mismatch` or
    `storage.sha256_mismatch`."""

    code = "storage.integrity"


class MultipartError(StorageError):
    """A direct multipart upload was unknown, already finished, or given bad parts."""

    code = "storage.multipart"


class BackendError(StorageError):
    """The backend itself failed (disk error, S3 error); `retryable` is set for transient causes."""

    code = "storage.backend"


class StorageMisconfigured(StorageError):
    code = "storage.misconfigured"
