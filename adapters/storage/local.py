"""Adapter storage on a local directory: the embedded default for one machine and for tests."""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import os
import stat
from pathlib import Path
from typing import BinaryIO

from .base import AdapterStorage, StoredObject
from .errors import BackendError, BadKey, NotFound, StorageError
from .keys import DEFAULT_ALLOWED_PREFIXES
from .streams import TEMP_PREFIX, Readable, read_source, read_stored, write_atomically


class LocalDiskStorage(AdapterStorage):
    """Objects are files under `root`, at the path spelled by their key.

    Besides key validation, every path is resolved and must equal its literal spelling under the
    real root: a symlink anywhere below the root (even one pointing inside it, which could hop from
    one prefix to another) is refused as `storage.bad_key`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        allowed_prefixes: tuple[str, ...] | builtins.list[str] = DEFAULT_ALLOWED_PREFIXES,
    ):
        super().__init__(allowed_prefixes)
        root_path = Path(root)
        if not root_path.is_absolute():
            raise BadKey(f"storage root {root_path} must be an absolute path")
        root_path.mkdir(parents=True, exist_ok=True)
        self.root = Path(os.path.realpath(root_path))

    def __repr__(self) -> str:
        return f"LocalDiskStorage(root={str(self.root)!r})"

    # -- writes ---------------------------------------------------------------------------------

    def save_stream(self, key: str, fileobj: Readable, *, max_bytes: int) -> StoredObject:
        path = self._path(key)
        hasher = hashlib.sha256()
        try:
            size = write_atomically(
                path,
                read_source(fileobj, hasher, max_bytes=max_bytes),
                prepare_dir=lambda: self._make_parent(path),
            )
        except BaseException as exc:
            self._prune_empty_dirs(path.parent)
            if isinstance(exc, OSError):
                raise BackendError(f"writing {key} failed: {exc}") from exc
            raise
        return StoredObject(key=key, size=size, sha256=hasher.hexdigest())

    def copy(self, src_key: str, dst_key: str) -> None:
        dst_path = self._path(dst_key)
        with self.open(src_key) as src:
            try:
                write_atomically(
                    dst_path,
                    read_stored(src, hashlib.sha256()),
                    prepare_dir=lambda: self._make_parent(dst_path),
                )
            except BaseException as exc:
                self._prune_empty_dirs(dst_path.parent)
                if isinstance(exc, OSError):
                    raise BackendError(f"copying {src_key} to {dst_key} failed: {exc}") from exc
                raise

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                return  # a folder is no object; like S3, deleting what is not there succeeds
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise BackendError(f"deleting {key} failed: {exc}") from exc
        self._prune_empty_dirs(path.parent)

    def delete_prefix(self, prefix: str) -> int:
        self.check_prefix(prefix, min_depth=2)
        top = self._confirm_inside(self.root / prefix.rstrip("/"))
        if not top.is_dir():
            return 0
        deleted = 0
        try:
            for dirpath, dirnames, filenames in os.walk(top, topdown=False, followlinks=False):
                for name in filenames:
                    os.unlink(os.path.join(dirpath, name))
                    deleted += 0 if name.startswith(TEMP_PREFIX) else 1
                for name in dirnames:
                    sub = os.path.join(dirpath, name)
                    # os.walk reports a symlink to a directory as a directory; remove the link only.
                    if os.path.islink(sub):
                        os.unlink(sub)
                    else:
                        os.rmdir(sub)
            os.rmdir(top)
        except OSError as exc:
            raise BackendError(f"deleting {prefix} failed after {deleted} objects: {exc}") from exc
        self._prune_empty_dirs(top.parent)
        return deleted

    # -- reads ----------------------------------------------------------------------------------

    def open(self, key: str) -> BinaryIO:
        path = self._path(key)
        try:
            # O_NOFOLLOW: a symlink swapped in after the check above still cannot be followed.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"{key} does not exist") from None
        except OSError as exc:
            raise BackendError(f"opening {key} failed: {exc}") from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotFound(f"{key} is not a regular file")
        return os.fdopen(fd, "rb")

    def exists(self, key: str) -> bool:
        return self._regular_stat(self._path(key)) is not None

    def size(self, key: str) -> int:
        st = self._regular_stat(self._path(key))
        if st is None:
            raise NotFound(f"{key} does not exist")
        return st.st_size

    def list(self, prefix: str) -> builtins.list[str]:
        self.check_prefix(prefix)
        top = self._confirm_inside(self.root / prefix.rstrip("/"))
        keys: builtins.list[str] = []
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                full = os.path.join(dirpath, name)
                if name.startswith(TEMP_PREFIX) or not os.path.isfile(full) or os.path.islink(full):
                    continue
                key = Path(full).relative_to(self.root).as_posix()
                with contextlib.suppress(StorageError):  # a stray file no key could name
                    keys.append(self.check_key(key))
        return sorted(keys)

    # -- paths ----------------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        self.check_key(key)
        return self._confirm_inside(self.root / key)

    def _confirm_inside(self, path: Path) -> Path:
        # Keys hold no '.', '..' or empty segments, so the literal path differs from the resolved
        # one only when an existing component is a symlink.
        if os.path.realpath(path) != str(path):
            raise BadKey(f"{path.relative_to(self.root)} passes through a symlink")
        return path

    def _make_parent(self, path: Path) -> None:
        parent = path.parent
        try:
            parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot create {parent}: {exc}") from exc
        self._confirm_inside(parent)

    def _prune_empty_dirs(self, directory: Path) -> None:
        """Remove now-empty folders up to (not including) the root; stop at the first non-empty."""
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    @staticmethod
    def _regular_stat(path: Path) -> os.stat_result | None:
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st if stat.S_ISREG(st.st_mode) else None
