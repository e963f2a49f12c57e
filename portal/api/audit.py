"""Audit log endpoints: list (filterable) and verify the chain."""

from __future__ import annotations

import django_filters
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from core.audit_models import AuditEvent
from portal.audit_verify import verify_chain
from portal.selectors import audit_events_for
from tenants.api_base import PlatformViewSet


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor_label",
            "tenant_label",
            "action",
            "object_type",
            "object_id",
            "before",
            "after",
            "request_id",
            "prev_hash",
            "hash",
        ]


class AuditFilter(django_filters.FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant_label")
    actor = django_filters.CharFilter(field_name="actor_label")
    action = django_filters.CharFilter(field_name="action")
    action_prefix = django_filters.CharFilter(field_name="action", lookup_expr="startswith")
    object_type = django_filters.CharFilter(field_name="object_type")
    object_id = django_filters.CharFilter(field_name="object_id")
    since = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields: list[str] = []


class AuditViewSet(mixins.ListModelMixin, PlatformViewSet):
    """Platform admins see every event; tenant owners see their tenants' events."""

    schema_model = AuditEvent
    serializer_class = AuditEventSerializer
    filterset_class = AuditFilter
    platform_roles = {"list": (), "verify": ("is_platform_admin",)}

    def get_queryset(self):
        return audit_events_for(access=self.access)

    @action(detail=False, methods=["get"])
    def verify(self, request):
        report = verify_chain()
        return Response(report.as_dict(), status=200 if report.ok else 409)
