"""Views that answer one action in a second format (CSV, JSON lines) answer everything else in JSON.

Content negotiation picks a renderer before the handler runs, from `?format=` or Accept, for
every method and action of the view: an OPTIONS, another action, or an error rendered by the CSV
or streaming renderer was a bare 500 or a body in the wrong shape. `FormattedActions`
keeps the chosen renderer only where the view made it for; tests/api/test_no_server_errors.py
checks every such view uses it.
"""

from __future__ import annotations

from typing import Any

from rest_framework.renderers import BaseRenderer, JSONRenderer

SAFE_METHODS = ("GET", "HEAD")


class FormattedActions:
    """Mix into a view whose renderer_classes add a format of its own."""

    formatted_actions: tuple[str, ...] = ("list",)

    def finalize_response(self, request: Any, response: Any, *args: Any, **kwargs: Any) -> Any:
        renderer = getattr(request, "accepted_renderer", None)
        made_for = (
            getattr(self, "action", None) in self.formatted_actions
            and request.method in SAFE_METHODS
            and response.status_code < 400
        )
        if renderer is not None and not isinstance(renderer, JSONRenderer) and not made_for:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]


class _Streamed(BaseRenderer):
    """Lets content negotiation accept ?format=csv|jsonl; the body is streamed by the view, and
    every other answer of the view is JSON (FormattedActions): nothing is rendered here."""

    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):
        raise NotImplementedError("the view streams its own body")


class CsvStreamRenderer(_Streamed):
    media_type, format = "text/csv", "csv"


class JsonLinesRenderer(_Streamed):
    media_type, format = "application/x-ndjson", "jsonl"
