"""The one domain error type; the API, pages and CLI turn it into responses."""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    """A refused request or transition, with a stable code and a message a person can act on."""

    status = 400

    def __init__(self, code: str, message: str, *, status: int | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        if status is not None:
            self.status = status
        self.extra = extra

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.extra:
            body["details"] = self.extra
        return body


class NotFound(ApplicationError):
    status = 404


class PermissionDenied(ApplicationError):
    status = 403


class Conflict(ApplicationError):
    status = 409


def clean_or_raise(obj: Any, **kwargs: Any) -> None:
    """Run a model's full_clean and turn the first failure into an ApplicationError."""
    from django.core.exceptions import ValidationError

    try:
        obj.full_clean(**kwargs)
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise ApplicationError(
            "invalid", f"{field}: {' '.join(messages)}", fields=exc.message_dict
        ) from None
