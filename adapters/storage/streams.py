"""Chunked reading with hashing and a size cap, and atomic local-file writes; shared by backends."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from .errors import BackendError, SourceFailed, TooLarge

CHUNK_SIZE = 1024 * 1024
TEMP_PREFIX = ".tmp-"


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


def read_source(
    fileobj: Readable, hasher: hashlib._Hash, *, max_bytes: int | None, chunk_size: int = CHUNK_SIZE
) -> Iterator[bytes]:
    """Yield the caller's stream in chunks, hashing as it goes.

    Failures of the source become SourceFailed (whatever the caller's file object raised) and going
    over `max_bytes` becomes TooLarge as soon as it happens, without reading the rest. Errors raised
    by the consumer of this iterator are not wrapped: they are the backend's, not the source's.
    """
    if max_bytes is not None and max_bytes < 0:
        raise ValueError("max_bytes must be >= 0")
    total = 0
    while True:
        try:
            chunk = fileobj.read(chunk_size)
        except Exception as exc:
            raise SourceFailed(f"reading the source failed after {total} bytes: {exc}") from exc
        if chunk is None:
            # A non-blocking raw stream with nothing ready; we only take blocking streams.
            raise SourceFailed("the source is non-blocking and returned no data")
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise SourceFailed(f"the source must be binary, it returned {type(chunk).__name__}")
        if not chunk:
            return
        total += len(chunk)
        if max_bytes is not None and total > max_bytes:
            raise TooLarge(f"the stream is larger than the limit of {max_bytes} bytes")
        hasher.update(chunk)
        yield bytes(chunk)


def read_stored(
    fileobj: BinaryIO, hasher: hashlib._Hash, chunk_size: int = CHUNK_SIZE
) -> Iterator[bytes]:
    """Yield an object opened from a backend, hashing as it goes (backend errors pass through)."""
    while chunk := fileobj.read(chunk_size):
        hasher.update(chunk)
        yield chunk


def write_atomically(
    path: Path,
    chunks: Iterable[bytes],
    *,
    mode: int = 0o640,
    prepare_dir: Callable[[], None] | None = None,
) -> int:
    """Write `chunks` to `path` so readers see the old file or the whole new one, never a part.

    Temp file in the same directory (same filesystem, so the rename is atomic), fsync of the file
    before the rename and of the directory after it (so a crash cannot leave a renamed but empty
    file). On any failure, including KeyboardInterrupt, the temp file is removed.
    `prepare_dir` (re)creates the parent directory; it is retried because a concurrent delete may
    prune an empty parent between its creation and our temp file. Returns the bytes written.
    """
    fd, tmp_name = _make_temp(path.parent, prepare_dir)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
                size += len(chunk)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fsync_dir(path.parent)
    return size


def _make_temp(directory: Path, prepare_dir: Callable[[], None] | None) -> tuple[int, str]:
    attempts = 5
    for attempt in range(attempts):
        if prepare_dir is not None:
            prepare_dir()
        try:
            return tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX, suffix=".part")
        except FileNotFoundError:
            if prepare_dir is None or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def fsync_dir(directory: Path) -> None:
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise BackendError(f"cannot open {directory} to sync it: {exc}") from exc
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
