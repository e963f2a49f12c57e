"""Page forms read through the API's own serializers, so a form and a JSON body are checked by
the same rules; the first field error becomes an ApplicationError the page shows with its code."""

from __future__ import annotations

from typing import Any

from core.errors import ApplicationError


def form_data(serializer_class: Any, data: Any, *, code: str, **kwargs: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data, **kwargs)
    if serializer.is_valid():
        return dict(serializer.validated_data)
    field, problems = next(iter(serializer.errors.items()))
    problem = problems[0] if isinstance(problems, list) and problems else problems
    if isinstance(problem, dict):  # a nested serializer: its first field's first message
        inner, messages = next(iter(problem.items()))
        field, problem = f"{field}.{inner}", messages[0] if isinstance(messages, list) else messages
    label = "" if field == "non_field_errors" else f"{field}: "
    raise ApplicationError(code, f"{label}{problem}", fields=serializer.errors)


def require_platform_role(access: Any, predicate: str, what: str) -> None:
    """The platform pages' check: AccessContext.require_platform_role, as the API's
    PlatformViewSet asks it (e.g. "is_platform_admin" for tenants), in the page's words."""
    from core.errors import PermissionDenied

    try:
        access.require_platform_role(predicate)
    except PermissionDenied as exc:
        raise PermissionDenied(
            exc.code, f"Your platform role does not allow you to {what}."
        ) from None
