"""boto3 plumbing for the S3 backend: client settings, error translation, the streaming reader."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from .errors import BackendError, MultipartError, NotFound, StorageError, StorageMisconfigured

_NOT_FOUND = {"NoSuchKey", "NotFound", "404"}
_MULTIPART_UNKNOWN = {"NoSuchUpload"}
_MULTIPART_INVALID = {"InvalidPart", "InvalidPartOrder", "EntityTooSmall", "MalformedXML"}
_MISCONFIGURED = {"NoSuchBucket", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied"}
_TRANSIENT = {"SlowDown", "RequestTimeout", "Throttling", "ThrottlingException", "InternalError"}


def client_config(addressing_style: str) -> Config:
    return Config(
        signature_version="s3v4",
        s3={"addressing_style": addressing_style},
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=10,
        read_timeout=120,
        # botocore >= 1.36 adds CRC checksums to every upload by default, which many S3-compatible
        # stores reject; we send Content-MD5 ourselves (understood everywhere) and verify sha256
        # end to end, so only send checksums where the API demands them.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )


def translate(exc: Exception, what: str) -> StorageError:
    """Map a boto error to our codes; connection-level failures and 5xx are retryable."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        detail = f"{what}: {code or status} {error.get('Message', '')}".strip()
        if code in _NOT_FOUND or (
            status == 404 and code not in _MULTIPART_UNKNOWN | {"NoSuchBucket"}
        ):
            return NotFound(detail)
        if code in _MULTIPART_UNKNOWN:
            return MultipartError(detail, code="storage.multipart_unknown")
        if code in _MULTIPART_INVALID:
            return MultipartError(detail, code="storage.multipart_invalid")
        if code in _MISCONFIGURED:
            return StorageMisconfigured(detail)
        if code == "BadDigest":
            return BackendError(detail, code="storage.transfer_corrupted", retryable=True)
        return BackendError(detail, retryable=status >= 500 or code in _TRANSIENT)
    if isinstance(exc, BotoCoreError):
        return BackendError(f"{what}: {exc}", retryable=True)
    return BackendError(f"{what}: {exc}")


@contextlib.contextmanager
def s3_errors(what: str) -> Iterator[None]:
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, what) from exc


class S3ReadStream(io.RawIOBase):
    """A GetObject body as a raw binary stream, so callers get a normal file object."""

    def __init__(self, body: Any, key: str):
        self._body = body
        self._key = key

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        with s3_errors(f"reading {self._key}"):
            data = self._body.read(len(view))
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(Exception):
                self._body.close()
        super().close()
