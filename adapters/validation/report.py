"""The validation report (JSON-serialisable) and the canonical manifest of an adapter's files."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from adapters.validation.codes import Issue

MANIFEST_FORMAT = "lora-portal/manifest/v1"
Outcome = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True)
class FileDigest:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class CheckResult:
    name: str
    outcome: Outcome
    codes: tuple[str, ...] = ()


def canonical_manifest(files: Iterable[FileDigest]) -> bytes:
    """The bytes a detached signature signs and manifest_sha256 hashes.

    Sorted keys, no whitespace, ASCII, files sorted by name; the format tag keeps a signature
    over these bytes from meaning anything in another protocol.
    """
    document = {
        "format": MANIFEST_FORMAT,
        "files": [
            {"name": f.name, "sha256": f.sha256, "size": f.size}
            for f in sorted(files, key=lambda f: f.name)
        ],
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def manifest_sha256(files: Iterable[FileDigest]) -> str:
    return hashlib.sha256(canonical_manifest(files)).hexdigest()


@dataclass
class ValidationReport:
    valid: bool
    errors: list[Issue]
    checks: list[CheckResult]
    base_model: str
    rank: int | None = None
    alpha: float | None = None
    use_rslora: bool = False
    target_modules: list[str] = field(default_factory=list)
    dtype: str | None = None
    size_bytes: int = 0
    files: list[FileDigest] = field(default_factory=list)
    manifest_sha256: str | None = None
    signature_format: str | None = None  # "model-signing" or "detached" when one was verified
    signer: str | None = None  # key id of the registered key that verified it
    config: dict[str, Any] | None = None
    errors_truncated: bool = False

    @property
    def error_codes(self) -> list[str]:
        return [e.code for e in self.errors]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["checks"] = [
            {"name": c.name, "outcome": c.outcome, "codes": list(c.codes)} for c in self.checks
        ]
        return data


class Recorder:
    """Collects every check that ran, with its outcome, and the errors (bounded in number)."""

    def __init__(self, max_errors: int = 200) -> None:
        self.errors: list[Issue] = []
        self.checks: list[CheckResult] = []
        self.truncated = False
        self._max_errors = max_errors

    def record(self, name: str, issues: Sequence[Issue]) -> bool:
        """Record one check; True when it passed."""
        for found in issues:
            if len(self.errors) < self._max_errors:
                self.errors.append(found)
            else:
                self.truncated = True  # a 10k-tensor file of bad names must not make a 10 MB report
        codes = tuple(dict.fromkeys(i.code for i in issues))
        self.checks.append(CheckResult(name, "failed" if issues else "passed", codes))
        return not issues

    def skip(self, name: str) -> None:
        self.checks.append(CheckResult(name, "skipped"))

    @property
    def failed(self) -> bool:
        return bool(self.errors)
