"""Files the client writes (exports, records, its config with the token): 0600, whole or not at
all, and never through a symbolic link (a link planted at the path could send a token or an
audit export wherever it points)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from lora_portal_client.errors import usage_error


def refuse_symlink(path: Path) -> None:
    if path.is_symlink():
        raise usage_error(
            "file.symlink",
            f"{path} is a symbolic link; the client does not write through links. "
            "Remove it or give another path.",
        )


@contextmanager
def private_file(path: Path) -> Iterator[BinaryIO]:
    """A new file at `path`, mode 0600, in place only once written whole.

    The bytes go to a fresh temporary file beside it (created exclusively, 0600: mkstemp's
    O_CREAT|O_EXCL|O_NOFOLLOW), which then replaces `path`; a rename replaces a link put there
    meanwhile instead of writing through it."""
    refuse_symlink(path)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as stream:
            yield stream
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)
