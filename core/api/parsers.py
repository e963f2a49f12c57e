"""The API's JSON bodies: one JSON object, nested at most MAX_BODY_DEPTH levels, else a 400.

Every write of the API reads its body as named fields (serializers, `request.data.get`): a list,
a string, a number or null for a body was a 500 (`AttributeError`) wherever a view read a field
before a serializer did, and a body nested past the interpreter's stack a 500 (`RecursionError`;
DRF's JSONParser turns only ValueError into a 400). `DEFAULT_PARSER_CLASSES` names this parser,
and every view that lists its own parsers uses it for JSON (tests/api/test_bodies.py holds both).
"""

from __future__ import annotations

from typing import Any

from rest_framework.parsers import JSONParser

from core.errors import ApplicationError
from core.json_depth import deeper_than

# The deepest body the API takes: its bodies nest 3-4 levels (an alias's targets, a base model's
# config.json); deeper only serves to exhaust a recursion.
MAX_BODY_DEPTH = 32


class JsonObjectParser(JSONParser):
    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            data: Any = super().parse(stream, media_type, parser_context)
        except RecursionError:
            data = _TOO_DEEP
        if data is _TOO_DEEP or deeper_than(data, MAX_BODY_DEPTH):
            raise ApplicationError(
                "body.too_deep", f"The JSON body nests deeper than {MAX_BODY_DEPTH} levels."
            )
        if not isinstance(data, dict):
            raise ApplicationError(
                "body.not_object",
                f"The body must be a JSON object ({{...}} with named fields), not {_kind(data)}.",
            )
        return data


_TOO_DEEP = object()


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    return "a number"
