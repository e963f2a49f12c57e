"""Checks an adapter's staged files against the portal's manifest before vLLM reads them.

Standard library only (it runs in the engine's API server, and the portal's tests import it by
path). The plugin builds the directory itself, `<PORTAL_ADAPTER_ROOT>/<served name>`; nothing here
takes a path from a request. Every refusal carries a stable code (see the package docstring).
Files are opened relative to the directory's own descriptor with O_NOFOLLOW, so a symlink swapped
in after the listing is refused rather than followed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADAPTER_ROOT_ENV = "PORTAL_ADAPTER_ROOT"
# Served names look like `acme--support--v3-1f2e3d4c`: no dots or slashes, so `<root>/<name>` is
# always a direct child of the root.
SERVED_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,118}[a-z0-9]$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_MANIFEST_FILES = 16
_CHUNK = 1 << 20


class FileCheckError(Exception):
    """A refusal with a stable code (`files.sha256_mismatch`, `name.invalid`, ...)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail

    @property
    def message(self) -> str:
        return f"{self.code}: {self.detail}"


@dataclass(frozen=True)
class ManifestEntry:
    name: str
    size: int
    sha256: str


# (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns): any write, replacement or rename of a
# file changes at least one of them (rename and chmod change ctime on Linux filesystems).
FileIdentity = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class VerifiedDir:
    """What was verified: re-checked after vLLM read the files (see `check_unchanged`)."""

    path: Path
    dir_identity: tuple[int, int]
    files: dict[str, FileIdentity]


def _identity(st: os.stat_result) -> FileIdentity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not SERVED_NAME.fullmatch(name):
        raise FileCheckError(
            "name.invalid",
            f"{name!r} is not a served name (lower-case letters, digits and '-', 2-120 chars)",
        )
    return name


def parse_manifest(raw: Any) -> tuple[ManifestEntry, ...]:
    """The request's manifest as entries; `manifest.invalid` for any other shape."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_MANIFEST_FILES:
        raise FileCheckError(
            "manifest.invalid", f"manifest must be a list of 1-{MAX_MANIFEST_FILES} files"
        )
    entries: list[ManifestEntry] = []
    for item in raw:
        if not isinstance(item, dict) or set(item) != {"name", "size", "sha256"}:
            raise FileCheckError(
                "manifest.invalid", "each file needs exactly 'name', 'size' and 'sha256'"
            )
        name, size, digest = item["name"], item["size"], item["sha256"]
        if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
            raise FileCheckError("manifest.invalid", f"{name!r} is not a plain file name")
        # bool is an int subclass; a size of `true` is a malformed manifest, not 1 byte.
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise FileCheckError("manifest.invalid", f"{name}: size must be an integer >= 0")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise FileCheckError("manifest.invalid", f"{name}: sha256 must be 64 lower-case hex")
        entries.append(ManifestEntry(name=name, size=size, sha256=digest))
    if len({e.name for e in entries}) != len(entries):
        raise FileCheckError("manifest.invalid", "file names repeat")
    return tuple(sorted(entries, key=lambda e: e.name))


def adapter_root_from(value: str | None) -> Path | None:
    """The root from the environment's value; None when unset or empty."""
    return Path(value) if value else None


def adapter_dir(root: Path | None, name: str) -> Path:
    """`<root>/<name>`; `root.unset` / `root.missing` when the engine has no usable root."""
    if root is None:
        raise FileCheckError("root.unset", f"{ADAPTER_ROOT_ENV} is not set on this engine")
    if not root.is_absolute() or not root.is_dir():
        raise FileCheckError("root.missing", f"the adapter root {root} is not a directory")
    return root / check_name(name)


def _open_root(path: Path) -> int:
    # The root itself may be a symlink the operator chose (/srv/adapters -> /data/adapters):
    # only the adapter's own directory and files are held to "no symlinks".
    return os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)


def _hash_fd(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def verify_dir(path: Path, manifest: tuple[ManifestEntry, ...]) -> VerifiedDir:
    """Refuse unless `path` is a real directory holding exactly the manifest's regular files with
    its sizes and sha256. Blocking (hashes whole files): run it in a thread."""
    root_fd = _open_root(path)
    try:
        dir_fd = os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
    except FileNotFoundError:
        raise FileCheckError("files.missing", f"{path.name}: no staged directory") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise FileCheckError(
                "files.not_regular", f"{path.name}: not a real directory (symlink or file)"
            ) from None
        raise
    finally:
        os.close(root_fd)
    try:
        dir_stat = os.fstat(dir_fd)
        files = _verify_entries(dir_fd, manifest)
    finally:
        os.close(dir_fd)
    return VerifiedDir(path=path, dir_identity=(dir_stat.st_dev, dir_stat.st_ino), files=files)


def _verify_entries(dir_fd: int, manifest: tuple[ManifestEntry, ...]) -> dict[str, FileIdentity]:
    present = set(os.listdir(dir_fd))
    wanted = {entry.name for entry in manifest}
    if missing := sorted(wanted - present):
        raise FileCheckError("files.missing", ", ".join(missing))
    if extra := sorted(present - wanted):
        raise FileCheckError("files.extra", ", ".join(extra))
    not_regular = sorted(
        e.name
        for e in manifest
        if not stat.S_ISREG(os.stat(e.name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    )
    if not_regular:
        raise FileCheckError("files.not_regular", ", ".join(not_regular))
    wrong_size = [
        f"{e.name} is {size} bytes, manifest says {e.size}"
        for e in manifest
        if (size := os.stat(e.name, dir_fd=dir_fd, follow_symlinks=False).st_size) != e.size
    ]
    if wrong_size:
        raise FileCheckError("files.size_mismatch", "; ".join(wrong_size))
    identities: dict[str, FileIdentity] = {}
    for entry in manifest:
        identities[entry.name] = _hash_and_check(dir_fd, entry)
    return identities


def _hash_and_check(dir_fd: int, entry: ManifestEntry) -> FileIdentity:
    # O_NONBLOCK: a FIFO swapped in after the listing must not block the open.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(entry.name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise FileCheckError("files.changed", f"{entry.name} vanished while verifying") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileCheckError("files.not_regular", entry.name) from None
        raise
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise FileCheckError("files.not_regular", entry.name)
        digest = _hash_fd(fd)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if _identity(before) != _identity(after):
        raise FileCheckError("files.changed", f"{entry.name} changed while it was hashed")
    if after.st_size != entry.size:
        raise FileCheckError(
            "files.size_mismatch",
            f"{entry.name} is {after.st_size} bytes, manifest says {entry.size}",
        )
    if digest != entry.sha256:
        raise FileCheckError(
            "files.sha256_mismatch",
            f"{entry.name} has sha256 {digest}, manifest says {entry.sha256}",
        )
    return _identity(after)


def check_unchanged(verified: VerifiedDir) -> None:
    """`files.changed` if the directory or any file is not the one verified (by path, as vLLM
    opened them), or something was added. Run after vLLM read the files."""
    try:
        dir_stat = os.lstat(verified.path)
        present = set(os.listdir(verified.path)) if stat.S_ISDIR(dir_stat.st_mode) else set()
        now = {
            name: _identity(os.lstat(verified.path / name))
            for name in verified.files
            if name in present
        }
    except FileNotFoundError:
        raise FileCheckError(
            "files.changed", f"{verified.path.name} vanished during the load"
        ) from None
    if (
        (dir_stat.st_dev, dir_stat.st_ino) != verified.dir_identity
        or stat.S_ISLNK(dir_stat.st_mode)
        or present != set(verified.files)
        or now != verified.files
    ):
        raise FileCheckError(
            "files.changed", f"{verified.path.name} changed between verification and load"
        )
