"""What an approval asks of the apps above the registry before a version is staged.

The registry never imports them: an app that gates approval (evals) registers a check in its
AppConfig.ready(). A check refuses by raising an ApplicationError (e.g. 409
version.eval_gate_failed) and otherwise returns what the reviewer saw, which the approval's
Decision keeps as evidence. An override travels to every check, which decides whether it may
use it and who may give it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from adapters.models import AdapterVersion
from tenants.access_port import Access


@dataclass(frozen=True)
class ApprovalOverride:
    """A reviewer's written decision to approve despite a failed check."""

    reason: str


class ApprovalCheck(Protocol):
    def __call__(
        self,
        *,
        version: AdapterVersion,
        access: Access,
        override: ApprovalOverride | None,
        request_id: str,
    ) -> dict[str, Any]: ...


_checks: list[ApprovalCheck] = []


def register(check: ApprovalCheck) -> None:
    if check not in _checks:
        _checks.append(check)


def run_checks(
    *, version: AdapterVersion, access: Access, override: ApprovalOverride | None, request_id: str
) -> dict[str, Any]:
    """Every registered check's evidence, merged; the first refusal raises."""
    evidence: dict[str, Any] = {}
    for check in _checks:
        evidence.update(
            check(version=version, access=access, override=override, request_id=request_id)
        )
    return evidence
