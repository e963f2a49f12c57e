"""One exception handler: every API error is JSON `{"error": {"code", "message", ...}}`."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ApplicationError

_CODES = {
    400: "invalid_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    429: "throttled",
}


def _first_message(detail: Any) -> str:
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    if isinstance(detail, dict) and detail:
        key, value = next(iter(detail.items()))
        inner = _first_message(value)
        return inner if key == "non_field_errors" else f"{key}: {inner}"
    return str(detail)


def error_response(code: str, message: str, status_code: int, **details: Any) -> Response:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    return Response({"error": body}, status=status_code)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        refused = error_response(exc.code, exc.message, exc.status, **exc.extra)
        if exc.status == 429 and "retry_after" in exc.extra:
            refused["Retry-After"] = str(exc.extra["retry_after"])
        return refused
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            detail=exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        )
    if isinstance(exc, Http404):
        return error_response("not_found", "Not found.", status.HTTP_404_NOT_FOUND)
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = _CODES.get(response.status_code, "error")
    if isinstance(exc, exceptions.ValidationError):
        return _with_headers(
            error_response("invalid_request", _first_message(exc.detail), 400, fields=exc.detail),
            response,
        )
    detail = getattr(exc, "detail", None)
    message = _first_message(detail) if detail is not None else str(exc)
    return _with_headers(error_response(code, message, response.status_code), response)


def _with_headers(new: Response, old: Response) -> Response:
    for header in ("WWW-Authenticate", "Retry-After", "Allow"):
        if header in old:
            new[header] = old[header]
    return new
