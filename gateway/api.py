"""REST endpoints for the gateway's numbers: an adapter's time series, and usage for chargeback.

- GET /tenants/{t}/adapters/{a}/metrics/?window=120s|60m: whoever may view the adapter.
- GET /tenants/{t}/usage/?from=&to=: the tenant's owners (and platform admins); usage is billing
  data, so maintainers and viewers are refused (403).
- GET /usage/?from=&to=[&tenant=]: platform admins, across tenants.
Both usage endpoints answer CSV with `?format=csv` or `Accept: text/csv`; errors stay JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from django.db.models import Manager, QuerySet
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.pagination import BasePagination
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.schemas.inspectors import ViewInspector
from rest_framework.views import APIView

from adapters import selectors as adapter_selectors
from adapters.models import Adapter
from core.api.formats import FormattedActions
from gateway import selectors
from gateway import serializers as s
from gateway.models import DailyUsage
from gateway.usage import require_usage_reader
from tenants.api_base import PlatformViewSet, TenantScopedViewSet
from tenants.models import Tenant


class OneObjectSchema(AutoSchema):
    """These `list` routes answer one object (not a page of rows): say so in the OpenAPI schema."""

    def _is_list_view(self, serializer: Any = None) -> bool:
        return False


class GatewayNumbersViewSet:
    """What the three viewsets share: one object per answer, no pagination, and a queryset only
    for the schema generator (the handlers read through gateway.selectors)."""

    schema: ViewInspector | None = OneObjectSchema()
    pagination_class: type[BasePagination] | None = None


class AdapterMetricsViewSet(GatewayNumbersViewSet, TenantScopedViewSet):
    """Per-second or per-minute points of one adapter (all its versions), for the live charts."""

    queryset = Adapter.objects.none()
    tenant_capabilities = {"list": "object"}  # the adapter lookup decides (404 if not visible)

    @extend_schema(parameters=[s.WindowSerializer], responses={200: s.AdapterMetricsSerializer})
    def list(self, request: Any, tenant: str | None = None, adapter: str = "") -> Response:
        obj = adapter_selectors.adapter_get(access=self.access, tenant=self.tenant, name=adapter)
        query = s.WindowSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        window = query.validated_data["window"]
        window_kwargs = s.WindowSerializer.as_kwargs(window)
        points = selectors.adapter_series(
            tenant=self.tenant.slug,
            adapter=obj.name,
            numbers=list(obj.versions.values_list("number", flat=True)),
            **window_kwargs,
        )
        body = {
            "tenant": self.tenant.slug,
            "adapter": obj.name,
            "window": window,
            "step_seconds": 1 if "seconds" in window_kwargs else 60,
            "points": [p.as_dict() for p in points],
        }
        return Response(s.AdapterMetricsSerializer(body).data)


USAGE_PARAMETERS = [
    OpenApiParameter("from", date, description="First UTC day (default: first of the month)"),
    OpenApiParameter("to", date, description="Last UTC day, included (default: today)"),
]


class UsageMixin(FormattedActions, GatewayNumbersViewSet):
    """JSON or CSV of the usage rows; any other answer is JSON whatever the caller accepts."""

    queryset: QuerySet[Any] | Manager[Any] | None = DailyUsage.objects.none()
    renderer_classes: Sequence[type[BaseRenderer]] = [
        *APIView.renderer_classes,  # the default renderers (api_settings)
        s.UsageCsvRenderer,
    ]

    def usage_response(self, request: Any, *, tenant: Tenant | None) -> Response:
        day_from, day_to = s.usage_range(request.query_params)
        rows = selectors.usage_rows(
            day_from=day_from, day_to=day_to, tenant_id=tenant.id if tenant else None
        )
        body = {
            "tenant": tenant.slug if tenant else None,
            "from": day_from.isoformat(),
            "to": day_to.isoformat(),
            "rows": s.UsageRowSerializer(rows, many=True).data,
        }
        response = Response(body)
        if request.accepted_renderer.format == "csv":
            name = f"usage-{tenant.slug if tenant else 'all'}-{day_from}-{day_to}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class TenantUsageViewSet(UsageMixin, TenantScopedViewSet):
    """A tenant's usage per day and version (owners, platform admins), JSON or CSV."""

    tenant_capabilities = {"list": "object"}  # owners and platform admins, checked below

    @extend_schema(parameters=USAGE_PARAMETERS, responses={200: s.UsageSerializer})
    def list(self, request: Any, tenant: str | None = None) -> Response:
        require_usage_reader(self.access, self.tenant)
        return self.usage_response(request, tenant=self.tenant)


class UsageViewSet(UsageMixin, PlatformViewSet):
    """Usage per day and version across tenants (platform admins; `?tenant=<slug>` narrows it
    to one), JSON or CSV."""

    platform_roles = {"list": ("is_platform_admin",)}

    @extend_schema(
        parameters=[*USAGE_PARAMETERS, OpenApiParameter("tenant", str)],
        responses={200: s.UsageSerializer},
    )
    def list(self, request: Any) -> Response:
        slug = request.query_params.get("tenant")
        tenant = self.access.get_tenant(slug) if slug else None
        return self.usage_response(request, tenant=tenant)
