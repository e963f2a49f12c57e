"""Which files an adapter may have, pickle detection, and opening a directory safely."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from adapters.validation.codes import Issue, issue

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
REQUIRED_FILES = (CONFIG_NAME, WEIGHTS_NAME)
# Formats that torch.load / pickle would open: refused whatever else is wrong with them.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def name_problem(name: str) -> Issue | None:
    """Names come from uploads: only a bare file name, never a path, is acceptable."""
    if (
        not name
        or name in (".", "..")
        or any(sep in name for sep in ("/", "\\", "\x00"))
        or not name.isprintable()
    ):
        return issue("file.name_invalid", name=name)
    if name.lower().endswith(PICKLE_SUFFIXES):
        return issue("file.pickle_refused", name=name, reason="a pickle file extension")
    return None


def pickle_reason(prefix: bytes) -> str | None:
    """Why the first bytes of a file look like a pickle or a torch zip archive, else None.

    Protocol 2+ pickles begin with PROTO (0x80) and the protocol number; torch.save writes a zip
    archive holding data.pkl. A safetensors file whose 8-byte length happens to start 0x80 0x0N
    is told apart by its JSON header, which opens with "{" at byte 8.
    """
    if prefix[:4] == b"PK\x03\x04":
        return "a zip archive, as torch.save writes"
    if len(prefix) >= 2 and prefix[0] == 0x80 and 2 <= prefix[1] <= 5:
        if len(prefix) > 8 and prefix[8:9] == b"{":
            return None
        return f"pickle protocol {prefix[1]} data"
    return None


def extra_file_issue(name: str, stream: BinaryIO) -> Issue:
    """Extra files are refused either way; say "pickle" when that is what they are."""
    found = name_problem(name)
    if found is not None:
        return found
    try:
        reason = pickle_reason(stream.read(16) or b"")
    except (OSError, ValueError):
        reason = None
    if reason:
        return issue("file.pickle_refused", name=name, reason=reason)
    return issue("file.unexpected", name=name)


@contextlib.contextmanager
def open_adapter_dir(
    path: str | os.PathLike[str],
) -> Iterator[tuple[dict[str, BinaryIO], list[Issue]]]:
    """Open the adapter's files in `path` without following links; report every other entry.

    Opened relative to a directory descriptor with O_NOFOLLOW, and checked with fstat after the
    open, so a file swapped for a link between listing and opening is still refused. Extra files
    are sniffed and closed at once, so a folder of many files cannot exhaust descriptors.
    """
    problems: list[Issue] = []
    streams: dict[str, BinaryIO] = {}
    dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in sorted(os.listdir(dir_fd)):
            try:
                fd = os.open(
                    name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
                )
            except OSError:
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
                code = "file.symlink_refused" if stat.S_ISLNK(mode) else "file.unreadable"
                problems.append(issue(code, name=name, reason="cannot be opened"))
                continue
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                problems.append(issue("file.not_regular", name=name))
                continue
            os.set_blocking(fd, True)
            stream = os.fdopen(fd, "rb", buffering=0)
            if name in REQUIRED_FILES:
                streams[name] = stream
            else:
                with stream:
                    problems.append(extra_file_issue(name, stream))
        yield streams, problems
    finally:
        for kept in streams.values():
            kept.close()
        os.close(dir_fd)
