"""REST endpoints for engines and what they hold (operators and platform admins)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from tenants.api_base import PlatformViewSet
from workers import serializers as s
from workers.alarms import open_alarms
from workers.models import Engine, FleetAction
from workers.selectors import (
    engine_advice,
    engine_launch_config,
    residencies_of_engine,
    version_from_label,
)
from workers.services.engines import engine_operator_transition, engine_request_reconcile
from workers.services.operator import operator_act
from workers.services.registry import engine_create, engine_update


class EngineViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    serializer_class = s.EngineSerializer
    queryset = Engine.objects.select_related("base_model")
    lookup_field = "name"
    lookup_url_kwarg = "engine"
    platform_roles = {
        "list": ("is_operator",),
        "retrieve": ("is_operator",),
        "residency": ("is_operator",),
        "create": ("is_operator",),  # placing a new engine: a platform admin (see create)
        "partial_update": ("is_operator",),
        "pin": ("is_operator",),
        "unpin": ("is_operator",),
        "warm": ("is_operator",),
        "evict": ("is_operator",),
        "drain": ("is_operator",),
        "undrain": ("is_operator",),
        "reconcile": ("is_operator",),
        "actions": ("is_operator",),
        "alarms": ("is_operator",),
        "advice": ("is_operator",),
        "launch_config": ("is_operator",),
    }
    action_scopes = {"create": "admin", "partial_update": "admin"}
    filterset_fields = ["pool", "state"]

    @extend_schema(request=s.EngineSerializer, responses={201: s.EngineSerializer})
    def create(self, request):
        data = s.EngineSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        engine = engine_create(
            access=self.access, fields=data.validated_data, request_id=self.request_id
        )
        return Response(s.EngineSerializer(engine).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.EngineUpdateSerializer, responses={200: s.EngineSerializer})
    def partial_update(self, request, engine=None):
        obj = self.get_object()
        data = s.EngineUpdateSerializer(obj, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        locked = engine_update(
            access=self.access, engine=obj, changes=data.validated_data, request_id=self.request_id
        )
        return Response(s.EngineSerializer(locked).data)

    @extend_schema(responses={200: s.ResidencySerializer(many=True)})
    @action(detail=True, methods=["get"])
    def residency(self, request, engine=None):
        obj = self.get_object()
        page = self.paginate_queryset(residencies_of_engine(obj).select_related("engine"))
        return self.get_paginated_response(s.ResidencySerializer(page, many=True).data)

    def _act(self, verb: str) -> Response:
        engine = self.get_object()
        data = self.request.data  # a JSON list has no "version": refused as a bad label
        version = version_from_label(data.get("version") if isinstance(data, dict) else None)
        row = operator_act(
            engine=engine,
            version=version,
            verb=verb,
            access=self.access,
            request_id=self.request_id,
        )
        row = residencies_of_engine(engine).select_related("engine").get(pk=row.pk)
        return Response(s.ResidencySerializer(row).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=s.VersionActionSerializer, responses={202: s.ResidencySerializer})
    @action(detail=True, methods=["post"])
    def pin(self, request, engine=None):
        """Pin a version in a GPU slot of this engine (refused when a hard rule forbids it)."""
        return self._act("pin")

    @extend_schema(request=s.VersionActionSerializer, responses={202: s.ResidencySerializer})
    @action(detail=True, methods=["post"])
    def unpin(self, request, engine=None):
        return self._act("unpin")

    @extend_schema(request=s.VersionActionSerializer, responses={202: s.ResidencySerializer})
    @action(detail=True, methods=["post"])
    def warm(self, request, engine=None):
        """Keep a version loaded and warm on this engine."""
        return self._act("warm")

    @extend_schema(request=s.VersionActionSerializer, responses={202: s.ResidencySerializer})
    @action(detail=True, methods=["post"])
    def evict(self, request, engine=None):
        """Remove a version from this engine (refused while it is pinned or has requests)."""
        return self._act("evict")

    def _transition(self, verb: str) -> Response:
        engine = engine_operator_transition(
            engine=self.get_object(),
            verb=verb,
            access=self.access,
            request_id=self.request_id,
        )
        return Response(s.EngineSerializer(engine).data)

    @extend_schema(request=None, responses={200: s.EngineSerializer})
    @action(detail=True, methods=["post"])
    def drain(self, request, engine=None):
        """No new traffic or adapters; its adapters are unloaded as their requests end."""
        return self._transition("drain")

    @extend_schema(request=None, responses={200: s.EngineSerializer})
    @action(detail=True, methods=["post"])
    def undrain(self, request, engine=None):
        return self._transition("undrain")

    @extend_schema(request=None, responses={202: None})
    @action(detail=True, methods=["post"])
    def reconcile(self, request, engine=None):
        """A converge pass now, instead of at the next period."""
        engine_obj = self.get_object()
        engine_request_reconcile(engine=engine_obj, access=self.access, request_id=self.request_id)
        return Response({"engine": engine_obj.name, "queued": True}, status=202)

    @extend_schema(responses={200: s.FleetActionSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def actions(self, request, engine=None):
        """The controller's log for this engine, newest first, with latencies."""
        qs = FleetAction.objects.filter(engine=self.get_object()).select_related("engine")
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(s.FleetActionSerializer(page, many=True).data)

    @extend_schema(responses={200: s.AdviceSerializer})
    @action(detail=True, methods=["get"])
    def advice(self, request, engine=None):
        """The --max-loras / --max-cpu-loras / --max-lora-rank this engine should run with, and why."""
        return Response(engine_advice(self.get_object()))

    @extend_schema(responses={200: s.LaunchConfigSerializer})
    @action(detail=True, methods=["get"], url_path="launch-config")
    def launch_config(self, request, engine=None):
        """Launch flags with the advice applied, and --lora-modules for static registration."""
        return Response(engine_launch_config(self.get_object()))

    @extend_schema(responses={200: s.AlarmSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def alarms(self, request, engine=None):
        page = self.paginate_queryset(open_alarms(self.get_object()))
        return self.get_paginated_response(s.AlarmSerializer(page, many=True).data)
