"""Storage keys: the portal builds them here and every backend validates them before use."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .errors import BadKey

QUARANTINE_PREFIX = "quarantine/"
SERVING_PREFIX = "serving/"
DEFAULT_ALLOWED_PREFIXES: tuple[str, ...] = (QUARANTINE_PREFIX, SERVING_PREFIX)

# S3 caps keys at 1024 bytes; filesystems cap a name at 255 bytes.
MAX_KEY_LENGTH = 1024
MAX_SEGMENT_LENGTH = 255

# ASCII letters, digits, dot, dash, underscore; a segment never starts with a dot (no `.`/`..`, no
# hidden files, and so never collides with the disk backend's `.tmp-*` files) nor a dash.
_SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def normalize_prefixes(prefixes: Iterable[str]) -> tuple[str, ...]:
    """Check configured top-level prefixes: each is one or more valid segments ending in '/'."""
    result: list[str] = []
    for prefix in prefixes:
        if not isinstance(prefix, str) or not prefix.endswith("/"):
            raise BadKey(f"allowed prefix {prefix!r} must be a string ending in '/'")
        _check_segments(prefix[:-1], what="allowed prefix")
        result.append(prefix)
    if not result:
        raise BadKey("no allowed key prefixes configured")
    return tuple(result)


def validate_key(key: object, allowed_prefixes: tuple[str, ...]) -> str:
    """Return `key` if it is a well-formed object key under an allowed prefix, else raise BadKey."""
    if not isinstance(key, str):
        raise BadKey(f"key must be a string, not {type(key).__name__}")
    if key.endswith("/"):
        raise BadKey(f"key {key!r} names a folder, not an object")
    _check_segments(key, what="key")
    _check_allowed(key, allowed_prefixes)
    return key


def validate_prefix(
    prefix: object, allowed_prefixes: tuple[str, ...], *, min_depth: int = 1
) -> str:
    """A listing/deletion prefix: whole segments ending in '/', so `a/b/` never matches `a/bc/...`.

    `min_depth` counts segments; deletions ask for 2 so one call cannot wipe a whole area.
    """
    if not isinstance(prefix, str):
        raise BadKey(f"prefix must be a string, not {type(prefix).__name__}")
    if not prefix.endswith("/"):
        raise BadKey(f"prefix {prefix!r} must end in '/'")
    body = prefix[:-1]
    _check_segments(body, what="prefix")
    if body.count("/") + 1 < min_depth:
        raise BadKey(f"prefix {prefix!r} is too broad (needs at least {min_depth} segments)")
    _check_allowed(prefix, allowed_prefixes)
    return prefix


def quarantine_key(
    tenant_slug: str, adapter_name: str, version_number: int, upload_id: str, filename: str
) -> str:
    """Where an upload lands before validation: one folder per upload attempt."""
    if (
        isinstance(version_number, bool)
        or not isinstance(version_number, int)
        or version_number < 1
    ):
        raise BadKey(f"version number must be a positive integer, not {version_number!r}")
    for what, value in (
        ("tenant slug", tenant_slug),
        ("adapter name", adapter_name),
        ("upload id", upload_id),
        ("filename", filename),
    ):
        _check_segment(value, what=what)
    return (
        f"{QUARANTINE_PREFIX}{tenant_slug}/{adapter_name}/v{version_number}/{upload_id}/{filename}"
    )


def serving_key(sha256: str, filename: str) -> str:
    """Content-addressed home of an approved file; identical bytes share one object."""
    if not isinstance(sha256, str) or not _SHA256_RE.fullmatch(sha256):
        raise BadKey(f"sha256 must be 64 lowercase hex digits, not {sha256!r}")
    _check_segment(filename, what="filename")
    return f"{SERVING_PREFIX}{sha256[:2]}/{sha256}/{filename}"


def _check_allowed(key: str, allowed_prefixes: tuple[str, ...]) -> None:
    if not any(key.startswith(prefix) for prefix in allowed_prefixes):
        raise BadKey(f"{key!r} is outside the allowed prefixes {list(allowed_prefixes)}")


def _check_segments(path: str, *, what: str) -> None:
    if len(path.encode("utf-8", "surrogatepass")) > MAX_KEY_LENGTH:
        raise BadKey(f"{what} is longer than {MAX_KEY_LENGTH} bytes")
    if path.startswith("/"):
        raise BadKey(f"{what} {path!r} is absolute")
    for segment in path.split("/"):
        _check_segment(segment, what=what, whole=path)


def _check_segment(segment: object, *, what: str, whole: str | None = None) -> None:
    shown = whole if whole is not None else segment
    if not isinstance(segment, str):
        raise BadKey(f"{what} must be a string, not {type(segment).__name__}")
    if segment == "":
        raise BadKey(f"{what} {shown!r} has an empty segment")
    if segment in (".", ".."):
        raise BadKey(f"{what} {shown!r} contains a relative segment {segment!r}")
    if "\x00" in segment:
        raise BadKey(f"{what} {shown!r} contains a NUL byte")
    if "\\" in segment:
        raise BadKey(f"{what} {shown!r} contains a backslash")
    if len(segment) > MAX_SEGMENT_LENGTH:
        raise BadKey(f"{what} has a segment longer than {MAX_SEGMENT_LENGTH} characters")
    if not _SEGMENT_RE.fullmatch(segment):
        raise BadKey(
            f"{what} {shown!r} has a segment {segment!r} outside [A-Za-z0-9._-] "
            "or starting with '.' or '-'"
        )
