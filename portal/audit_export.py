"""Exporting the audit log as CSV or JSON Lines, streamed in id order with bounded memory.

Rows are read by one query in id order through a server-side cursor (`.iterator(chunk_size=)`),
EXPORT_BATCH rows at a time, and written as they come, so a range of any size holds one batch
in memory. Each line carries the event's id, every field its hash covers
(core.audit.event_content), `prev_hash` and `hash`: over an unfiltered range, each line's
`prev_hash` is the previous line's `hash`, and with the chain key (portal side) each hash can be
recomputed from its line. The reach (which tenants'
events) is adapters/access.py's `require_audit_export`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from itertools import islice
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import QuerySet

from core.audit import record_event
from core.audit_models import AuditEvent
from core.errors import ApplicationError
from portal.evidence import audit_event_dict
from tenants.models import Tenant

EXPORT_BATCH = 2000
FORMATS = {"csv": "text/csv", "jsonl": "application/x-ndjson"}


@dataclass(frozen=True)
class ExportQuery:
    format: str
    tenant_ids: list[int] | None  # None: every tenant's (and platform) events
    since: datetime | None
    until: datetime | None
    action: str
    columns: tuple[str, ...]  # the line format: the client's contract

    def queryset(self) -> QuerySet[AuditEvent]:
        qs = AuditEvent.objects.all()
        if self.tenant_ids is not None:
            qs = qs.filter(tenant_id__in=self.tenant_ids)
        if self.since is not None:
            qs = qs.filter(created_at__gte=self.since)
        if self.until is not None:
            qs = qs.filter(created_at__lt=self.until)
        if self.action.endswith("*"):
            qs = qs.filter(action__startswith=self.action[:-1])
        elif self.action:
            qs = qs.filter(action=self.action)
        return qs


def _moment(raw: str, name: str, *, end: bool) -> datetime | None:
    """A day (`to` includes it) or an ISO date-time; naive times are UTC."""
    if not raw:
        return None
    try:
        if len(raw) == 10:
            day = date.fromisoformat(raw)
            return datetime.combine(day + timedelta(days=1 if end else 0), time.min, tzinfo=UTC)
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise ApplicationError(
            "audit.bad_range", f"'{name}' must be YYYY-MM-DD or an ISO 8601 date-time."
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def export_query(*, access: Any, params: Any) -> ExportQuery:
    """Parse and authorise `format`, `tenant`, `from`, `to`, `action`; nothing is read yet."""
    fmt = params.get("format") or "jsonl"
    if fmt not in FORMATS:
        raise ApplicationError("audit.bad_format", "'format' must be 'csv' or 'jsonl'.")
    slug = (params.get("tenant") or "").strip()
    tenant = None
    if slug:
        tenant = access.visible_tenants().filter(slug=slug).first()
        if tenant is None:
            raise ApplicationError(
                "tenant.not_found", f"No tenant '{slug}' is visible to you.", status=404
            )
    reach = access.require_audit_export(tenant)
    since = _moment(params.get("from") or "", "from", end=False)
    until = _moment(params.get("to") or "", "to", end=True)
    if since and until and since >= until:
        raise ApplicationError("audit.bad_range", "'from' must be before 'to'.")
    action = (params.get("action") or "").strip()[:61]
    # Imported here, before any byte is sent: without the client package an export fails whole.
    from lora_portal_client.evidence import AUDIT_EVENT_FIELDS

    return ExportQuery(fmt, reach, since, until, action, AUDIT_EVENT_FIELDS)


def record_export(*, access: Any, query: ExportQuery, request_id: str = "") -> None:
    """Who took which part of the audit log away (an export is audited like a change)."""
    tenant = (
        Tenant.objects.filter(id=query.tenant_ids[0]).first()
        if query.tenant_ids and len(query.tenant_ids) == 1
        else None
    )
    record_event(
        action="audit.export",
        actor=access.user,
        tenant=tenant,
        object_type="audit",
        after={
            "format": query.format,
            "tenant_ids": query.tenant_ids,
            "from": query.since.isoformat() if query.since else None,
            "to": query.until.isoformat() if query.until else None,
            "action": query.action,
        },
        request_id=request_id,
    )


def _events(query: ExportQuery) -> Iterator[AuditEvent]:
    """One query in id order, read through a server-side cursor EXPORT_BATCH rows at a time;
    it stops at the newest event when the export starts, a consistent, finite range."""
    upto = AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    rows = query.queryset().filter(pk__lte=upto).order_by("pk")
    return rows.iterator(chunk_size=EXPORT_BATCH)


def _next_batch(events: Iterator[AuditEvent]) -> list[AuditEvent]:
    return list(islice(events, EXPORT_BATCH))


def _encode(query: ExportQuery, events: list[AuditEvent], *, header: bool) -> bytes:
    rows = [audit_event_dict(e) for e in events]
    if query.format == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=query.columns, lineterminator="\r\n")
    if header:
        writer.writeheader()
    for row in rows:
        for name in ("before", "after"):
            row[name] = "" if row[name] is None else json.dumps(row[name], ensure_ascii=False)
        writer.writerow({k: "" if row[k] is None else row[k] for k in query.columns})
    return out.getvalue().encode()


def export_lines(query: ExportQuery) -> Iterator[bytes]:
    """Synchronous batches (the test client, WSGI)."""
    if query.format == "csv":
        yield _encode(query, [], header=True)
    events = _events(query)
    while batch := _next_batch(events):
        yield _encode(query, batch, header=False)


async def export_stream(query: ExportQuery) -> AsyncIterator[bytes]:
    """The same for ASGI: Django would read a synchronous iterator whole before sending it.
    Every step runs in the request's one sync thread, so the cursor stays on its connection."""
    if query.format == "csv":
        yield _encode(query, [], header=True)
    events = await sync_to_async(_events)(query)
    while batch := await sync_to_async(_next_batch)(events):
        yield await sync_to_async(_encode)(query, batch, header=False)
