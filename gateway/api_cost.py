"""The cost view's API: GET /cost/?from=&to=&tenant= (JSON, or CSV with ?format=csv: one line
per tenant's share) and GET/PUT /cost/settings/ (the price per engine-hour; platform admins set
it). Who sees what is adapters/access.py's `cost_tenant_reach`."""

from __future__ import annotations

import csv
import io
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.formats import FormattedActions
from gateway.api import USAGE_PARAMETERS, GatewayNumbersViewSet
from gateway.cost import FLEET_FRACTIONS, cost_report, cost_settings, cost_settings_update
from gateway.models import CostSettings
from gateway.serializers import usage_range
from tenants.api_base import PortalViewSet

CSV_COLUMNS = (
    "tenant",
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "tokens",
    "slot_seconds",
    "share_requests",
    "share_tokens",
    "share_slot_seconds",
    "cost",
)


class CostCsvRenderer(BaseRenderer):
    """Each tenant's share as CSV, with the range, price and currency on every line (a tenant's
    owners: their own figures, without the fractions of the fleet's totals)."""

    media_type, format, charset = "text/csv", "csv", "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):
        out = io.StringIO()
        own = data.get("scope") != "fleet"
        shown = [name for name in CSV_COLUMNS if not (own and name in FLEET_FRACTIONS)]
        columns = ("from", "to", *shown, "currency", "price_per_engine_hour")
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\r\n")
        writer.writeheader()
        for row in data.get("tenants", []):
            writer.writerow(
                {
                    **{name: row[name] for name in shown},
                    "from": data["from"],
                    "to": data["to"],
                    "currency": data["currency"],
                    "price_per_engine_hour": data["price_per_engine_hour"],
                }
            )
        return out.getvalue().encode(self.charset)


class CostSettingsSerializer(serializers.ModelSerializer):
    updated_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = CostSettings
        fields = [
            "price_per_engine_hour",
            "currency",
            "dedicated_slots",
            "updated_by",
            "updated_at",
        ]
        read_only_fields = ["updated_by", "updated_at"]


class CostViewSet(FormattedActions, GatewayNumbersViewSet, PortalViewSet):
    schema_model = CostSettings
    action_scopes = {"update_settings": "admin"}
    renderer_classes = [*APIView.renderer_classes, CostCsvRenderer]

    def check_access(self) -> None:
        """Reach is decided per query (cost_tenant_reach); settings changes by the service."""

    @extend_schema(
        parameters=[*USAGE_PARAMETERS, OpenApiParameter("tenant", str)],
        responses={200: OpenApiTypes.OBJECT},
    )
    def list(self, request: Any) -> Response:
        day_from, day_to = usage_range(request.query_params)
        slug = (request.query_params.get("tenant") or "").strip()
        tenant = self.access.get_tenant(slug) if slug else None
        report = cost_report(access=self.access, day_from=day_from, day_to=day_to, tenant=tenant)
        response = Response(report.as_dict())
        if request.accepted_renderer.format == "csv":
            name = f"cost-{slug or 'all'}-{day_from}-{day_to}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    @extend_schema(responses={200: CostSettingsSerializer})
    def read_settings(self, request: Any) -> Response:
        self.access.cost_tenant_reach(None)  # the fleet's readers (platform admins, auditors)
        return Response(CostSettingsSerializer(cost_settings()).data)

    @extend_schema(request=CostSettingsSerializer, responses={200: CostSettingsSerializer})
    def update_settings(self, request: Any) -> Response:
        data = request.data
        current = cost_settings()
        row = cost_settings_update(
            access=self.access,
            price_per_engine_hour=data.get("price_per_engine_hour", current.price_per_engine_hour),
            currency=data.get("currency", current.currency),
            dedicated_slots=data.get("dedicated_slots", current.dedicated_slots),
            request_id=self.request_id,
        )
        return Response(CostSettingsSerializer(row).data)
