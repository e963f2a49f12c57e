"""Compliance endpoints: a version's record, the key that signs records, the audit export.

- GET /tenants/{t}/adapters/{a}/versions/{n}/evidence/: the signed record (owners, platform
  admins, auditors; another tenant's version is 404).
- GET /evidence/key/: the public half of the evidence key, to pin when verifying offline
  (anyone signed in).
- GET /audit/export/?format=csv|jsonl&tenant=&from=&to=&action=: streamed (portal.audit_export).
"""

from __future__ import annotations

from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from adapters.models import AdapterVersion
from core.api.formats import CsvStreamRenderer, FormattedActions, JsonLinesRenderer
from core.audit_models import AuditEvent
from portal import audit_export
from portal.evidence import version_evidence
from tenants.api_base import PlatformViewSet, PortalViewSet, TenantScopedViewSet


class EvidenceViewSet(TenantScopedViewSet):
    schema_model = AdapterVersion
    tenant_capabilities = {"retrieve": "object"}  # checked in version_evidence
    pagination_class = None

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def retrieve(self, request: Any, tenant: str, adapter: str, number: int) -> Response:
        record = version_evidence(
            access=self.access,
            tenant=self.tenant,
            adapter=adapter,
            number=int(number),
            request_id=self.request_id,
        )
        response = Response(record)
        name = f"evidence-{self.tenant.slug}-{adapter}-{number}.json"
        response["Content-Disposition"] = f'inline; filename="{name}"'
        return response


class EvidenceKeyViewSet(PlatformViewSet):
    """Whoever signs in may learn which key the portal signs records with (it is in every
    record too; pin it when verifying offline)."""

    platform_roles = {"list": ()}
    pagination_class = None

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def list(self, request: Any) -> Response:
        from portal.evidence_signing import published_key

        return Response(published_key())


class AuditExportViewSet(FormattedActions, PortalViewSet):
    schema_model = AuditEvent
    renderer_classes = [JSONRenderer, CsvStreamRenderer, JsonLinesRenderer]
    pagination_class = None

    @extend_schema(
        parameters=[
            OpenApiParameter("format", str, enum=["csv", "jsonl"]),
            OpenApiParameter("tenant", str),
            OpenApiParameter("from", str, description="YYYY-MM-DD or ISO date-time (UTC)"),
            OpenApiParameter("to", str, description="YYYY-MM-DD (included) or ISO date-time"),
            OpenApiParameter("action", str, description="exact, or a prefix ending in '*'"),
        ],
        responses={(200, "application/x-ndjson"): OpenApiTypes.STR},
    )
    def list(self, request: Any) -> StreamingHttpResponse:
        query = audit_export.export_query(access=self.access, params=request.query_params)
        audit_export.record_export(access=self.access, query=query, request_id=self.request_id)
        # Under ASGI an async iterator, else Django would read a sync one whole before sending.
        streamed = isinstance(request._request, ASGIRequest)
        body = audit_export.export_stream(query) if streamed else audit_export.export_lines(query)
        response = StreamingHttpResponse(body, content_type=audit_export.FORMATS[query.format])
        name = f"audit-export.{query.format}"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    def perform_content_negotiation(self, request: Any, force: bool = False) -> Any:
        # An unknown ?format= is the handler's clear 400 (audit.bad_format), not DRF's bare 404.
        return super().perform_content_negotiation(request, force=True)
