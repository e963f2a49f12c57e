"""Gives every request an id that audit events and logs carry."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import cast

from django.http import HttpRequest, HttpResponse

from core.request import PortalRequest

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        # A caller-chosen id is kept only when it is harmless to log and store.
        request_id = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        # Setting the attribute is what makes the request a PortalRequest.
        cast(PortalRequest, request).request_id = request_id
        response = self.get_response(request)
        response["X-Request-ID"] = request_id
        return response
