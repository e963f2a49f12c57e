"""A version's lifecycle as traces: each step (upload, validate, approve, promote, release,
stage, load on an engine) is a span named `lora_portal.version.<step>` with the version's
identity, in the upload's trace (Celery carries it into the tasks the upload starts) or linked
to it (a later request, a scheduled pass): AdapterVersion.upload_traceparent."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from core import telemetry

if TYPE_CHECKING:
    from adapters.models import AdapterVersion

F = TypeVar("F", bound=Callable[..., Any])


def version_span(step: str, version: AdapterVersion, **attributes: Any) -> Any:
    """The span of one step of `version`'s lifecycle (the null context while tracing is off)."""
    if telemetry.tracer() is None:
        return telemetry.span("", {})
    identity = {
        "lora_portal.tenant": version.tenant.slug,
        "lora_portal.adapter": version.adapter.name,
        "lora_portal.adapter_version": f"{version.adapter.name}@{version.number}",
        "lora_portal.served_name": version.served_name,
        **attributes,
    }
    return telemetry.span(
        f"lora_portal.version.{step}", identity, links_to=version.upload_traceparent
    )


def upload_trace_id(version: AdapterVersion) -> str:
    """The trace the version's upload began ('' when it was not traced)."""
    return telemetry.trace_id_of(version.upload_traceparent)


def upload_span(adapter: Any) -> Any:
    """The upload's span, before its version exists (its identity is added by `uploaded`)."""
    return telemetry.span(
        "lora_portal.version.upload",
        {"lora_portal.tenant": adapter.tenant.slug, "lora_portal.adapter": adapter.name},
    )


def uploaded(version: AdapterVersion) -> None:
    """The new version's identity on the upload's span."""
    if telemetry.tracer() is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(
        {
            "lora_portal.adapter_version": f"{version.adapter.name}@{version.number}",
            "lora_portal.served_name": version.served_name,
        }
    )


def traced_step(step: str) -> Callable[[F], F]:
    """Run the decorated function (which takes the version as an argument) inside the span of
    `step`; a plain call while tracing is off."""

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def traced(*args: Any, **kwargs: Any) -> Any:
            if telemetry.tracer() is None:
                return func(*args, **kwargs)
            version = next(
                (a for a in (*args, *kwargs.values()) if hasattr(a, "upload_traceparent")), None
            )
            if version is None:
                return func(*args, **kwargs)
            engine = next((a for a in (*args, *kwargs.values()) if hasattr(a, "max_loras")), None)
            extra = {"lora_portal.engine": engine.name} if engine is not None else {}
            with version_span(step, version, **extra):
                return func(*args, **kwargs)

        return cast(F, traced)

    return wrap


def trace_url(version: AdapterVersion) -> str:
    """The upload's trace in the trace store (settings.TRACE_URL_TEMPLATE), '' when the upload
    was not traced or no store is configured."""
    from django.conf import settings

    trace_id = upload_trace_id(version)
    template = settings.TRACE_URL_TEMPLATE
    return template.replace("{trace_id}", trace_id) if trace_id and template else ""
