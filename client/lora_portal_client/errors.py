"""The client's one error type, and the exit codes a pipeline acts on (docs/cli.md)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import httpx


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # the request could not be completed: network, server error; retrying may help
    REFUSED = 2  # the portal said no: version rejected, action refused, not found, bad input
    TIMEOUT = 3  # `wait` ran out of time
    USAGE = 4  # bad command-line arguments or a missing local file/setting
    AUTH = 5  # no token, or the portal does not accept it (401)


class PortalError(Exception):
    """A failure with a stable code, a message a person can act on, and its exit code."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        exit_code: ExitCode = ExitCode.ERROR,
        status: int | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.exit_code = exit_code
        self.status = status
        self.details = details

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.status is not None:
            body["status"] = self.status
        if self.details is not None:
            body["details"] = self.details
        return body


class ApiError(PortalError):
    """The portal answered with an error: its `{"error": {"code", "message"}}` body, kept whole."""

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        status = response.status_code
        code, message, details = f"http_{status}", response.reason_phrase, None
        try:
            body = response.json()
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            code = str(error.get("code", code))
            message = str(error.get("message", message))
            details = error.get("details")
        return cls(code, message, exit_code=exit_code_for(status), status=status, details=details)


def exit_code_for(status: int) -> ExitCode:
    if status == 401:
        return ExitCode.AUTH
    if 400 <= status < 500:
        return ExitCode.REFUSED
    return ExitCode.ERROR


def usage_error(code: str, message: str) -> PortalError:
    return PortalError(code, message, exit_code=ExitCode.USAGE)
