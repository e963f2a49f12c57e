"""`wait`: follow a version until it reaches a status, is refused, or time runs out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lora_portal_client.client import Client
from lora_portal_client.errors import ExitCode, PortalError
from lora_portal_client.refs import VersionRef

# How far along the lifecycle each status is; reaching a later one counts as reaching the target.
PROGRESS = {"uploaded": 0, "validating": 1, "validated": 2, "staged": 3, "active": 4}
TARGETS = ("validated", "staged", "active")
REFUSED = ("rejected", "disabled", "retired")


def wait_for(
    client: Client,
    ref: VersionRef,
    *,
    until: str = "validated",
    timeout: float = 600.0,
    interval: float = 2.0,
    on_change: Callable[[dict[str, Any]], None] = lambda version: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """The version once it is at `until` or later; PortalError (exit 2) if it was refused on the
    way, (exit 3) if `timeout` seconds pass first."""
    deadline = clock() + timeout
    seen = None
    while True:
        version = client.version(ref)
        status = version["status"]
        if status != seen:
            on_change(version)
            seen = status
        if PROGRESS.get(status, -1) >= PROGRESS[until]:
            return version
        if status in REFUSED:
            raise PortalError(
                f"version.{status}",
                f"{ref} is {status}.",
                exit_code=ExitCode.REFUSED,
                details={"version": str(ref), "errors": refusal_reasons(version)},
            )
        left = deadline - clock()
        if left <= 0:
            raise PortalError(
                "wait.timeout",
                f"{ref} is still {status} after {timeout:g} s (waiting for {until}).",
                exit_code=ExitCode.TIMEOUT,
                details={"version": str(ref), "status": status},
            )
        sleep(min(interval, left))


def refusal_reasons(version: dict[str, Any]) -> list[dict[str, str]]:
    """Why a version was refused: the validation report's errors, then reviewers' rejections."""
    report = version.get("validation_report") or {}
    reasons = [
        {"code": str(e.get("code", "")), "message": str(e.get("message", ""))}
        for e in report.get("errors", [])
    ]
    for decision in version.get("decisions", []):
        if decision.get("kind") in ("reject", "disable"):
            reasons.append(
                {
                    "code": f"decision.{decision['kind']}",
                    "message": f"{decision.get('actor')}: {decision.get('comment', '')}",
                }
            )
    return reasons
