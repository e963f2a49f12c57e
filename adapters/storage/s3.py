"""Adapter storage in an S3 bucket (AWS or any S3-compatible store) through boto3."""

from __future__ import annotations

import base64
import builtins
import hashlib
import io
import logging
import math
from collections.abc import Iterator
from typing import Any, BinaryIO

import boto3

from .base import AdapterStorage, CompletedPart, PendingUpload, StoredObject
from .errors import MultipartError, NotFound, StorageError
from .keys import DEFAULT_ALLOWED_PREFIXES
from .s3_support import S3ReadStream, client_config, s3_errors, translate
from .streams import CHUNK_SIZE, Readable, read_source

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
GiB = 1024 * MiB
MIN_PART_SIZE = 5 * MiB  # S3's floor for every part but the last
MAX_PARTS = 10_000
MAX_PART_SIZE = 5 * 1024 * 1024 * 1024
MAX_PRESIGN_SECONDS = 7 * 24 * 3600  # SigV4 limit
MAX_SINGLE_COPY = 5 * GiB  # CopyObject's limit; above it, copy part by part


class S3Storage(AdapterStorage):
    """Objects in one bucket. Streams larger than one part go up as a multipart upload, part by
    part, so memory stays at about one part whatever the file size; a failed upload is aborted."""

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        allowed_prefixes: tuple[str, ...] | builtins.list[str] = DEFAULT_ALLOWED_PREFIXES,
        part_size: int = 8 * MiB,
        copy_part_size: int = 1 * GiB,
        max_single_copy: int = MAX_SINGLE_COPY,
        presign_endpoint_url: str | None = None,
        client: Any | None = None,
    ):
        super().__init__(allowed_prefixes)
        if not bucket:
            raise StorageError("an S3 bucket name is required", code="storage.misconfigured")
        if part_size < MIN_PART_SIZE or copy_part_size < MIN_PART_SIZE:
            raise ValueError(f"part sizes must be at least {MIN_PART_SIZE} bytes")
        self.bucket = bucket
        self.part_size = part_size
        self.copy_part_size = copy_part_size
        self.max_single_copy = max_single_copy
        # Path style for custom endpoints: MinIO, moto and most S3-compatible stores expect it.
        config = client_config("path" if endpoint_url else "auto")
        session = boto3.session.Session(
            aws_access_key_id=access_key_id or None,
            aws_secret_access_key=secret_access_key or None,
            region_name=region or None,
        )
        self.client = client or session.client(
            "s3", endpoint_url=endpoint_url or None, config=config
        )
        # Presigned URLs are used by clients outside the cluster, which may need another host name.
        self._presign_client = (
            session.client("s3", endpoint_url=presign_endpoint_url, config=config)
            if presign_endpoint_url
            else self.client
        )

    def __repr__(self) -> str:
        return f"S3Storage(bucket={self.bucket!r}, endpoint={self.client.meta.endpoint_url!r})"

    # -- writes ---------------------------------------------------------------------------------

    def save_stream(self, key: str, fileobj: Readable, *, max_bytes: int) -> StoredObject:
        self.check_key(key)
        part_size = self._part_size_for(max_bytes)
        hasher = hashlib.sha256()
        buffer = bytearray()
        parts: builtins.list[CompletedPart] = []
        upload_id: str | None = None
        size = 0
        try:
            for chunk in read_source(fileobj, hasher, max_bytes=max_bytes):
                buffer += chunk
                size += len(chunk)
                if len(buffer) >= part_size:
                    if upload_id is None:
                        upload_id = self.create_multipart(key)
                    parts.append(self._upload_part(key, upload_id, len(parts) + 1, buffer))
            if upload_id is None:
                body = bytes(buffer)
                buffer.clear()
                with s3_errors(f"storing {key}"):
                    self.client.put_object(
                        Bucket=self.bucket, Key=key, Body=body, ContentMD5=_md5_b64(body)
                    )
            else:
                if buffer:
                    parts.append(self._upload_part(key, upload_id, len(parts) + 1, buffer))
                self._complete(key, upload_id, parts)
        except BaseException:
            if upload_id is not None:
                self._abort_quietly(key, upload_id)
            raise
        return StoredObject(key=key, size=size, sha256=hasher.hexdigest())

    def copy(self, src_key: str, dst_key: str) -> None:
        self.check_key(src_key)
        self.check_key(dst_key)
        size = self.size(src_key)
        if src_key == dst_key:
            return
        source = {"Bucket": self.bucket, "Key": src_key}
        if size <= self.max_single_copy:
            with s3_errors(f"copying {src_key} to {dst_key}"):
                self.client.copy_object(Bucket=self.bucket, Key=dst_key, CopySource=source)
            return
        upload_id = self.create_multipart(dst_key)
        try:
            parts = []
            for number, start in enumerate(range(0, size, self.copy_part_size), start=1):
                end = min(start + self.copy_part_size, size) - 1
                with s3_errors(f"copying {src_key} to {dst_key}"):
                    response = self.client.upload_part_copy(
                        Bucket=self.bucket,
                        Key=dst_key,
                        UploadId=upload_id,
                        PartNumber=number,
                        CopySource=source,
                        CopySourceRange=f"bytes={start}-{end}",
                    )
                parts.append(CompletedPart(number, response["CopyPartResult"]["ETag"]))
            self._complete(dst_key, upload_id, parts)
        except BaseException:
            self._abort_quietly(dst_key, upload_id)
            raise

    def delete(self, key: str) -> None:
        self.check_key(key)
        with s3_errors(f"deleting {key}"):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def delete_prefix(self, prefix: str) -> int:
        self.check_prefix(prefix, min_depth=2)
        # Pending uploads under the prefix belong to what is being deleted (an abandoned upload).
        for pending in self.list_multipart_uploads(prefix):
            self._abort_quietly(pending.key, pending.upload_id)
        deleted = 0
        batch: builtins.list[str] = []
        for key in self._iter_keys(prefix):
            batch.append(key)
            if len(batch) == 1000:  # DeleteObjects' limit
                deleted += self._delete_batch(batch)
                batch = []
        if batch:
            deleted += self._delete_batch(batch)
        return deleted

    # -- reads ----------------------------------------------------------------------------------

    def open(self, key: str) -> BinaryIO:
        self.check_key(key)
        with s3_errors(f"opening {key}"):
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        return io.BufferedReader(S3ReadStream(response["Body"], key), buffer_size=CHUNK_SIZE)

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except NotFound:
            return False
        return True

    def size(self, key: str) -> int:
        self.check_key(key)
        with s3_errors(f"reading the size of {key}"):
            response = self.client.head_object(Bucket=self.bucket, Key=key)
        return int(response["ContentLength"])

    def list(self, prefix: str) -> builtins.list[str]:
        self.check_prefix(prefix)
        return sorted(self._iter_keys(prefix))

    # -- direct multipart (presigned parts) ----------------------------------------------------

    def create_multipart(self, key: str) -> str:
        self.check_key(key)
        with s3_errors(f"starting an upload of {key}"):
            response = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)
        return str(response["UploadId"])

    def presign_part(
        self,
        key: str,
        upload_id: str,
        part_number: int,
        expires: int,
        *,
        content_length: int | None = None,
    ) -> str:
        """A URL the client PUTs one part's bytes to; the response's ETag header names the part.

        With `content_length` the length is signed into the URL, so S3 refuses a part of any other
        size: a client cannot park more bytes in the bucket than the portal agreed to.
        """
        self.check_key(key)
        _check_upload_id(upload_id)
        _check_part_number(part_number)
        if not 1 <= expires <= MAX_PRESIGN_SECONDS:
            raise MultipartError(
                f"expiry must be 1..{MAX_PRESIGN_SECONDS} seconds", code="storage.multipart_invalid"
            )
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "UploadId": upload_id,
            "PartNumber": part_number,
        }
        if content_length is not None:
            if isinstance(content_length, bool) or not 0 < content_length <= MAX_PART_SIZE:
                raise MultipartError(
                    f"part length must be 1..{MAX_PART_SIZE}", code="storage.multipart_invalid"
                )
            params["ContentLength"] = content_length
        with s3_errors(f"presigning part {part_number} of {key}"):
            return str(
                self._presign_client.generate_presigned_url(
                    "upload_part",
                    Params=params,
                    ExpiresIn=expires,
                    HttpMethod="PUT",
                )
            )

    def complete_multipart(
        self, key: str, upload_id: str, parts: builtins.list[CompletedPart]
    ) -> int:
        """Assemble the parts; returns the object's size. Follow with verify_object: the store only
        knows the parts it was sent, not what the client meant to send."""
        self.check_key(key)
        _check_upload_id(upload_id)
        numbers = [part.part_number for part in parts]
        if not parts:
            raise MultipartError("no parts given", code="storage.multipart_invalid")
        if len(set(numbers)) != len(numbers):
            raise MultipartError("a part number is repeated", code="storage.multipart_invalid")
        for part in parts:
            _check_part_number(part.part_number)
            if not isinstance(part.etag, str) or not part.etag.strip('"'):
                raise MultipartError(
                    f"part {part.part_number} has no ETag", code="storage.multipart_invalid"
                )
        # Checked against the server's own list first: a precise error for an unknown upload or a
        # wrong ETag, the same on every S3-compatible store (some answer 500 to a bad completion).
        uploaded = self._uploaded_parts(key, upload_id)
        for part in parts:
            if part.part_number not in uploaded:
                raise MultipartError(
                    f"part {part.part_number} was never uploaded", code="storage.multipart_invalid"
                )
            if part.etag.strip('"') != uploaded[part.part_number]:
                raise MultipartError(
                    f"part {part.part_number} has another ETag on the server (re-upload it)",
                    code="storage.multipart_invalid",
                )
        self._complete(key, upload_id, sorted(parts, key=lambda p: p.part_number))
        return self.size(key)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        """Drop an upload and its parts; aborting an unknown or finished upload is not an error."""
        self.check_key(key)
        _check_upload_id(upload_id)
        try:
            with s3_errors(f"aborting the upload of {key}"):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except MultipartError as exc:
            if exc.code != "storage.multipart_unknown":
                raise

    def list_multipart_uploads(self, prefix: str) -> builtins.list[PendingUpload]:
        """Uploads started and neither completed nor aborted; a janitor aborts the stale ones."""
        self.check_prefix(prefix)
        pending: builtins.list[PendingUpload] = []
        with s3_errors(f"listing uploads under {prefix}"):
            paginator = self.client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for upload in page.get("Uploads", []):
                    pending.append(
                        PendingUpload(upload["Key"], upload["UploadId"], upload.get("Initiated"))
                    )
        return pending

    # -- internals ------------------------------------------------------------------------------

    def _part_size_for(self, max_bytes: int) -> int:
        # Enough parts for the largest allowed stream, rounded to whole MiB.
        needed = math.ceil(max(max_bytes, 0) / MAX_PARTS)
        return max(self.part_size, math.ceil(needed / MiB) * MiB)

    def _upload_part(
        self, key: str, upload_id: str, number: int, buffer: bytearray
    ) -> CompletedPart:
        body = bytes(buffer)
        buffer.clear()
        with s3_errors(f"uploading part {number} of {key}"):
            response = self.client.upload_part(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
                ContentMD5=_md5_b64(body),
            )
        return CompletedPart(number, response["ETag"])

    def _uploaded_parts(self, key: str, upload_id: str) -> dict[int, str]:
        etags: dict[int, str] = {}
        with s3_errors(f"listing the parts of {key}"):
            paginator = self.client.get_paginator("list_parts")
            for page in paginator.paginate(Bucket=self.bucket, Key=key, UploadId=upload_id):
                for part in page.get("Parts", []):
                    etags[int(part["PartNumber"])] = str(part["ETag"]).strip('"')
        return etags

    def _complete(self, key: str, upload_id: str, parts: builtins.list[CompletedPart]) -> None:
        with s3_errors(f"completing the upload of {key}"):
            self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={
                    "Parts": [{"PartNumber": p.part_number, "ETag": p.etag} for p in parts]
                },
            )

    def _abort_quietly(self, key: str, upload_id: str) -> None:
        # Called while another error propagates: that error is the one to report. A lifecycle rule
        # (AbortIncompleteMultipartUpload) on the bucket catches what a dead connection leaves.
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except Exception as exc:
            if translate(exc, "abort").code != "storage.multipart_unknown":
                logger.warning("could not abort upload %s of %s: %s", upload_id, key, exc)

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        with s3_errors(f"listing {prefix}"):
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    try:
                        key = self.check_key(item["Key"])
                    except StorageError:
                        continue  # a foreign object that no portal key could name
                    yield key

    def _delete_batch(self, keys: builtins.list[str]) -> int:
        with s3_errors("deleting objects"):
            response = self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
            )
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            raise StorageError(
                f"{len(errors)} objects were not deleted, e.g. {first.get('Key')}: "
                f"{first.get('Code')} {first.get('Message')}",
                code="storage.backend",
                retryable=True,
            )
        return len(keys)


def _md5_b64(body: bytes) -> str:
    # Content-MD5 lets the store reject a part corrupted in transit (BadDigest).
    return base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode("ascii")


def _check_part_number(part_number: int) -> None:
    if isinstance(part_number, bool) or not isinstance(part_number, int):
        raise MultipartError("part number must be an integer", code="storage.multipart_invalid")
    if not 1 <= part_number <= MAX_PARTS:
        raise MultipartError(
            f"part number must be 1..{MAX_PARTS}, not {part_number}",
            code="storage.multipart_invalid",
        )


def _check_upload_id(upload_id: str) -> None:
    if not isinstance(upload_id, str) or not upload_id or len(upload_id) > 1024:
        raise MultipartError("upload id is missing or malformed", code="storage.multipart_invalid")
