"""The node side of the fleet: a version's files on the engine's node disk, verified.

Layout under the engine's adapter root (a node path from the Engine row, never from a request):
`<root>/<served name>/` holds exactly the version's manifest files; downloads land in
`<root>/.incoming/` and are renamed into place only after every sha256 matched; a copy that fails
verification moves to `<root>/.quarantine/` (kept for forensics). Served names are immutable, so a
directory is never rewritten in place.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from adapters.models import AdapterVersion
from adapters.storage import StorageError, get_storage
from adapters.tracing import traced_step
from core import telemetry
from core.errors import ApplicationError

SERVED_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,118}[a-z0-9]$")
INCOMING = ".incoming"
QUARANTINE = ".quarantine"
_CHUNK = 1024 * 1024


class NodeCopyInvalid(Exception):
    """The node's copy of a version does not match its manifest (code, e.g. files.sha256_mismatch)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class StageResult:
    path: Path
    downloaded: bool  # False: a verified copy was already there
    ms: float


def node_dir(adapter_root: str, served_name: str) -> Path:
    """`<root>/<served name>`, refusing any name that could leave the root."""
    if not SERVED_NAME_RE.match(served_name or ""):
        raise ApplicationError("fleet.bad_served_name", f"{served_name!r} is not a served name.")
    root = Path(adapter_root)
    if not root.is_absolute():
        raise ApplicationError(
            "fleet.bad_adapter_root", f"The engine's adapter root {adapter_root!r} is not absolute."
        )
    return root / served_name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_node_copy(path: Path, manifest: list[dict]) -> None:
    """Raise NodeCopyInvalid unless `path` holds exactly the manifest's files, byte for byte."""
    if path.is_symlink() or not path.is_dir():
        raise NodeCopyInvalid("files.not_directory", f"{path.name} is not a plain directory")
    expected = {entry["name"]: entry for entry in manifest}
    present = {p.name for p in path.iterdir()}
    if extra := sorted(present - set(expected)):
        raise NodeCopyInvalid("files.extra", f"unexpected files: {', '.join(extra)}")
    if missing := sorted(set(expected) - present):
        raise NodeCopyInvalid("files.missing", f"missing files: {', '.join(missing)}")
    for name, entry in sorted(expected.items()):
        file = path / name
        if file.is_symlink() or not file.is_file():
            raise NodeCopyInvalid("files.not_regular", f"{name} is not a regular file")
        if file.stat().st_size != int(entry["size"]):
            raise NodeCopyInvalid(
                "files.size_mismatch",
                f"{name} has {file.stat().st_size} bytes, expected {entry['size']}",
            )
        if _sha256(file) != entry["sha256"]:
            raise NodeCopyInvalid("files.sha256_mismatch", f"{name} does not match its sha256")


def quarantine_node_copy(adapter_root: str, served_name: str) -> Path | None:
    """Move the node's copy aside (never deleted here: someone may want to look at it)."""
    path = node_dir(adapter_root, served_name)
    if not path.exists() and not path.is_symlink():
        return None
    target = Path(adapter_root) / QUARANTINE / f"{served_name}-{int(time.time())}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, target)
    return target


@traced_step("stage")
def stage_on_node(*, adapter_root: str, version: AdapterVersion) -> StageResult:
    """Make `<root>/<served name>` a verified copy of the version's serving files.

    An existing verified copy is kept (no download). A copy that fails verification raises
    NodeCopyInvalid; the caller quarantines it and raises the alarm, and the next call downloads
    a fresh copy.
    """
    started = time.monotonic()
    path = node_dir(adapter_root, version.served_name)
    if path.exists() or path.is_symlink():
        verify_node_copy(path, version.manifest)
        telemetry.annotate({"lora_portal.stage.downloaded": False})
        return StageResult(path, False, (time.monotonic() - started) * 1000)
    if not version.serving_keys:
        raise ApplicationError(
            "fleet.not_promoted", f"{version.served_name} has no files in the serving store yet."
        )
    drop_abandoned_downloads(adapter_root, version.served_name)
    incoming = Path(adapter_root) / INCOMING / _download_name(version.served_name)
    incoming.mkdir(parents=True)
    storage = get_storage()
    try:
        for entry in version.manifest:
            key = version.serving_keys.get(entry["name"])
            if key is None:
                raise ApplicationError(
                    "fleet.not_promoted", f"{entry['name']} of {version.served_name} is not served."
                )
            stored = storage.download_to(
                key, incoming / entry["name"], expected_sha256=entry["sha256"]
            )
            if stored.size != int(entry["size"]):
                raise NodeCopyInvalid("files.size_mismatch", f"{entry['name']} size differs")
        verify_node_copy(incoming, version.manifest)
        incoming.chmod(0o755)
        try:
            os.rename(incoming, path)
        except OSError:
            # Another worker staged it meanwhile: keep theirs if it verifies.
            verify_node_copy(path, version.manifest)
    except StorageError as exc:
        raise ApplicationError(
            getattr(exc, "code", "storage.error"), f"staging {version.served_name}: {exc}"
        ) from exc
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
    telemetry.annotate({"lora_portal.stage.downloaded": True})
    return StageResult(path, True, (time.monotonic() - started) * 1000)


def _download_name(served_name: str) -> str:
    """`<served name>~<host>~<pid>~<random>`: whose download it is, so that a download whose
    process was killed (its `finally` never ran) is told apart from one under way."""
    return f"{served_name}~{socket.gethostname()}~{os.getpid()}~{uuid.uuid4().hex[:8]}"


def _abandoned(name: str) -> bool:
    """A download of this host's whose process is gone (a worker killed in the middle)."""
    parts = name.split("~")
    if len(parts) != 4 or parts[1] != socket.gethostname() or not parts[2].isdigit():
        return False
    try:
        os.kill(int(parts[2]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def drop_abandoned_downloads(adapter_root: str, served_name: str | None = None) -> list[str]:
    """Remove the half downloads (of `served_name`, or of any version) whose process died."""
    folder = Path(adapter_root) / INCOMING
    if not folder.is_dir():
        return []
    dropped = []
    for partial in folder.iterdir():
        if served_name is not None and not partial.name.startswith(served_name + "~"):
            continue
        if _abandoned(partial.name):
            shutil.rmtree(partial, ignore_errors=True)
            dropped.append(partial.name)
    return dropped


def cleanup_node(*, adapter_root: str, keep: Iterable[str], grace_s: float) -> list[str]:
    """Delete staged copies not in `keep` that are older than the grace period; return their names.

    `keep` must hold every name an engine has registered or the controller wants: those files are
    never deleted. Leftover downloads older than the grace period go too.
    """
    root = Path(adapter_root)
    if not root.is_dir():
        return []
    keep = set(keep)
    now = time.time()
    removed: list[str] = []
    for entry in root.iterdir():
        if entry.name in keep or entry.name == QUARANTINE or entry.is_symlink():
            continue
        if entry.name != INCOMING and not SERVED_NAME_RE.match(entry.name):
            continue  # not ours
        try:
            age = now - entry.stat().st_mtime
        except FileNotFoundError:
            continue
        if entry.name == INCOMING:
            drop_abandoned_downloads(adapter_root)
            for partial in entry.iterdir():
                if now - partial.stat().st_mtime > grace_s:
                    shutil.rmtree(partial, ignore_errors=True)
            continue
        if age > grace_s and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return sorted(removed)
