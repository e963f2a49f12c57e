"""Refusals of the portal routes, answered in vLLM's own error body shape so one client parses both."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from portal_engine_plugin.files import FileCheckError

# Which HTTP status a FileCheckError's code family answers with.
_STATUS_BY_FAMILY = {"name": 400, "manifest": 400, "root": 503, "files": 409}
_TYPE_BY_STATUS = {400: "InvalidUserInput", 409: "Conflict", 503: "ServiceUnavailable"}


class Refused(Exception):
    """Raised inside a handler to answer with an error body (see `error_response`)."""

    def __init__(self, status: int, err_type: str, message: str) -> None:
        super().__init__(message)
        self.status, self.err_type, self.message = status, err_type, message

    @classmethod
    def from_file_check(cls, error: FileCheckError) -> Refused:
        status = _STATUS_BY_FAMILY.get(error.code.split(".", 1)[0], 409)
        return cls(status, _TYPE_BY_STATUS[status], error.message)


def error_response(status: int, err_type: str, message: str) -> JSONResponse:
    return JSONResponse(
        status_code=status,
        content={"error": {"message": message, "type": err_type, "param": None, "code": status}},
    )
