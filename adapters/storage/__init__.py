"""Adapter file storage: one interface (`AdapterStorage`), local-disk and S3 backends, key rules.

No Django model imports here; only `get_storage()` reads settings.
"""

from .base import AdapterStorage, CompletedPart, DirectMultipartStorage, PendingUpload, StoredObject
from .errors import (
    BackendError,
    BadKey,
    IntegrityMismatch,
    MultipartError,
    NotFound,
    SourceFailed,
    StorageError,
    StorageMisconfigured,
    TooLarge,
)
from .factory import get_storage
from .keys import QUARANTINE_PREFIX, SERVING_PREFIX, quarantine_key, serving_key, validate_key
from .local import LocalDiskStorage
from .streams import CHUNK_SIZE

__all__ = [
    "CHUNK_SIZE",
    "QUARANTINE_PREFIX",
    "SERVING_PREFIX",
    "AdapterStorage",
    "BackendError",
    "BadKey",
    "CompletedPart",
    "DirectMultipartStorage",
    "IntegrityMismatch",
    "LocalDiskStorage",
    "MultipartError",
    "NotFound",
    "PendingUpload",
    "SourceFailed",
    "StorageError",
    "StorageMisconfigured",
    "StoredObject",
    "TooLarge",
    "get_storage",
    "quarantine_key",
    "serving_key",
    "validate_key",
]


def __getattr__(name: str) -> object:
    # boto3 takes ~0.3 s to import; load the S3 backend only when someone asks for it.
    if name == "S3Storage":
        from .s3 import S3Storage

        return S3Storage
    raise AttributeError(name)
