"""`push`: one adapter directory becomes a new version, through the plain multipart upload or,
for a large model file, straight to object storage in parts (the portal never sees the bytes)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from lora_portal_client.client import Client
from lora_portal_client.errors import PortalError, usage_error
from lora_portal_client.refs import AdapterRef
from lora_portal_client.signing import ADAPTER_FILES, sign_directory

MiB = 1024 * 1024
DEFAULT_DIRECT_THRESHOLD = 64 * MiB
CHUNK = MiB

Progress = Callable[[int], None]  # called with the bytes just sent


def check_directory(directory: Path) -> int:
    """The model file's size; a clear usage error if either file is missing."""
    missing = [name for name in ADAPTER_FILES if not (directory / name).is_file()]
    if missing:
        raise usage_error(
            "push.missing_files",
            f"{directory} must hold {' and '.join(ADAPTER_FILES)}; missing: {', '.join(missing)}.",
        )
    return (directory / "adapter_model.safetensors").stat().st_size


def push(
    client: Client,
    ref: AdapterRef,
    directory: Path,
    *,
    sign_key: Path | None = None,
    direct_threshold: int = DEFAULT_DIRECT_THRESHOLD,
    part_size: int | None = None,
    progress: Callable[[int], Progress] | None = None,
) -> dict[str, Any]:
    """Upload `directory` as a new version of `ref`; the version's detail as the portal has it.

    `progress(total)` is called once the direct path knows the size, and returns the callable fed
    with each chunk sent.
    """
    model_size = check_directory(directory)
    signature = sign_directory(directory, sign_key) if sign_key else None
    if model_size < direct_threshold:
        return client.upload_version(ref, directory, signature=signature)
    return _push_direct(client, ref, directory, model_size, signature, part_size, progress)


def _push_direct(
    client: Client,
    ref: AdapterRef,
    directory: Path,
    model_size: int,
    signature: bytes | None,
    part_size: int | None,
    progress: Callable[[int], Progress] | None,
) -> dict[str, Any]:
    config_text = (directory / "adapter_config.json").read_text(encoding="utf-8")
    started = client.direct_upload_start(
        ref, model_size=model_size, config_text=config_text, part_size=part_size
    )
    advance = progress(model_size) if progress else (lambda n: None)
    digest = hashlib.sha256()
    try:
        parts = []
        with open(directory / "adapter_model.safetensors", "rb") as model:
            for part in started["parts"]:
                model.seek((part["part_number"] - 1) * started["part_size"])
                chunks = _read_part(model, part["size"], digest, advance)
                etag = client.put_part(part["url"], chunks, part["size"])
                parts.append({"part_number": part["part_number"], "etag": etag})
        return client.direct_upload_complete(
            ref,
            started["upload"],
            parts=parts,
            sha256=digest.hexdigest(),
            # Detached signatures travel as base64 text in the completion's JSON.
            signature=base64.b64encode(signature).decode() if signature else None,
        )
    except BaseException:
        # Leave nothing behind: the portal aborts the multipart upload and forgets it. A failed
        # completion has mostly discarded it already (the abort is then a 404): the error that
        # matters is the one that got us here.
        with contextlib.suppress(PortalError):
            client.direct_upload_abort(ref, started["upload"])
        raise


def _read_part(stream: BinaryIO, size: int, digest: Any, advance: Progress) -> Iterator[bytes]:
    # Parts are read in order, so hashing as they go gives the whole file's sha256.
    left = size
    while left:
        chunk = stream.read(min(CHUNK, left))
        if not chunk:
            raise usage_error("push.file_changed", "The model file shrank while it was uploaded.")
        digest.update(chunk)
        left -= len(chunk)
        advance(len(chunk))
        yield chunk
