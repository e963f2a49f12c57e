"""Shapes of the gateway's REST answers: adapter time series and usage rows (JSON and CSV)."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypedDict

from drf_spectacular.utils import inline_serializer
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer

from core.errors import ApplicationError
from gateway.selectors import MAX_MINUTES, MAX_SECONDS, USAGE_COLUMNS

WINDOW = re.compile(r"^([1-9][0-9]{0,4})(s|m)$")
MAX_USAGE_DAYS = 92  # one quarter per request; more is a report, not an API call


class Window(TypedDict, total=False):
    """adapter_series' window: one of the two."""

    seconds: int
    minutes: int


class WindowSerializer(serializers.Serializer):
    """`?window=120s` (per-second points) or `?window=60m` (per-minute points)."""

    window = serializers.CharField(required=False, default="120s")

    def validate_window(self, value: str) -> str:
        match = WINDOW.match(value)
        limit = {"s": MAX_SECONDS, "m": MAX_MINUTES}
        if match is None or int(match.group(1)) > limit[match.group(2)]:
            raise ApplicationError(
                "metrics.bad_window",
                f"window is <N>s (1..{MAX_SECONDS}) or <N>m (1..{MAX_MINUTES}), e.g. 120s or 60m.",
            )
        return value

    @staticmethod
    def as_kwargs(window: str) -> Window:
        match = WINDOW.match(window)
        assert match is not None
        if match.group(2) == "s":
            return {"seconds": int(match.group(1))}
        return {"minutes": int(match.group(1))}


class SeriesPointSerializer(serializers.Serializer):
    t = serializers.IntegerField(help_text="Epoch seconds at the start of the period")
    requests = serializers.IntegerField()
    # DRF's metaclass takes declared fields off the class: Serializer.errors is not shadowed.
    errors = serializers.IntegerField()  # type: ignore[assignment]
    cold = serializers.IntegerField(allow_null=True)
    hit_ratio = serializers.FloatField(allow_null=True)
    ttft_ms = serializers.FloatField(allow_null=True, help_text="Mean time to first token")


class AdapterMetricsSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    adapter = serializers.CharField()
    window = serializers.CharField()
    step_seconds = serializers.IntegerField()
    points = SeriesPointSerializer(many=True)


def usage_range(params: Any) -> tuple[date, date]:
    """`?from=YYYY-MM-DD&to=YYYY-MM-DD` (UTC days, both included); default: this month so far."""
    day_to = _day(params.get("to"), "to") or datetime.now(UTC).date()
    day_from = _day(params.get("from"), "from") or day_to.replace(day=1)
    if day_from > day_to:
        raise ApplicationError("usage.bad_range", "'from' is after 'to'.")
    if day_to - day_from >= timedelta(days=MAX_USAGE_DAYS):
        raise ApplicationError(
            "usage.range_too_long", f"Ask for at most {MAX_USAGE_DAYS} days at a time."
        )
    return day_from, day_to


def _day(raw: str | None, name: str) -> date | None:
    if not raw:
        return None
    try:
        return datetime.strptime(raw, "%Y-%m-%d").date()
    except ValueError:
        raise ApplicationError("usage.bad_date", f"'{name}' must be YYYY-MM-DD.") from None


class UsageRowSerializer(serializers.Serializer):
    day = serializers.DateField()
    tenant = serializers.CharField()
    adapter = serializers.CharField(allow_null=True, help_text="null: the base model itself")
    version = serializers.CharField(allow_null=True, help_text="adapter@N")
    service_class = serializers.CharField(
        allow_blank=True, help_text="the service class its requests were admitted as ('' none)"
    )
    requests = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    shadow_requests = serializers.IntegerField(
        help_text="of `requests`, those release plans' shadow pairs asked"
    )
    shadow_prompt_tokens = serializers.IntegerField()
    shadow_completion_tokens = serializers.IntegerField()


# `from` is a Python keyword, so this shape is declared inline (for the OpenAPI schema).
UsageSerializer = inline_serializer(
    name="Usage",
    fields={
        "tenant": serializers.CharField(allow_null=True, help_text="null: every tenant"),
        "from": serializers.DateField(),
        "to": serializers.DateField(),
        "rows": UsageRowSerializer(many=True),
    },
)


class UsageCsvRenderer(BaseRenderer):
    """The usage rows as CSV, one line per day and version, with a header line."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=USAGE_COLUMNS, lineterminator="\r\n")
        writer.writeheader()
        for row in data.get("rows", []):
            writer.writerow({k: "" if row[k] is None else row[k] for k in USAGE_COLUMNS})
        return out.getvalue().encode(self.charset)
