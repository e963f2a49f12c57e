"""REST endpoints for engines and what they hold (operators and platform admins)."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.api.base import PlatformViewSet
from portal.audit import record_event
from portal.errors import Conflict, clean_or_raise
from workers import serializers as s
from workers.models import Engine, Residency

ENGINE_AUDIT_FIELDS = (
    "pool",
    "url",
    "served_model_name",
    "max_loras",
    "max_cpu_loras",
    "max_lora_rank",
    "adapter_root",
    "state",
    "required",
)


class EngineViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    serializer_class = s.EngineSerializer
    queryset = Engine.objects.select_related("base_model")
    lookup_field = "name"
    lookup_url_kwarg = "engine"
    platform_roles = {
        "list": ("is_operator",),
        "retrieve": ("is_operator",),
        "residency": ("is_operator",),
        "create": ("is_operator",),
        "partial_update": ("is_operator",),
    }
    action_scopes = {"create": "admin", "partial_update": "admin"}
    filterset_fields = ["pool", "state"]

    @extend_schema(request=s.EngineSerializer, responses={201: s.EngineSerializer})
    def create(self, request):
        data = s.EngineSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        engine = Engine(**data.validated_data)
        clean_or_raise(engine, validate_unique=False)
        try:
            with transaction.atomic():
                engine.save()
                record_event(
                    action="engine.create",
                    actor=request.user,
                    obj=engine,
                    object_id=engine.name,
                    after={k: getattr(engine, k) for k in ENGINE_AUDIT_FIELDS},
                    request_id=self.request_id,
                )
        except IntegrityError:
            raise Conflict(
                "engine.exists", f"An engine named '{engine.name}' already exists."
            ) from None
        return Response(s.EngineSerializer(engine).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.EngineUpdateSerializer, responses={200: s.EngineSerializer})
    def partial_update(self, request, engine=None):
        obj = self.get_object()
        data = s.EngineUpdateSerializer(obj, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        with transaction.atomic():
            locked = Engine.objects.select_for_update().get(pk=obj.pk)
            before = {k: getattr(locked, k) for k in data.validated_data}
            for key, value in data.validated_data.items():
                setattr(locked, key, value)
            clean_or_raise(locked, validate_unique=False)
            locked.save()
            record_event(
                action="engine.update",
                actor=request.user,
                obj=locked,
                object_id=locked.name,
                before=before,
                after={k: getattr(locked, k) for k in data.validated_data},
                request_id=self.request_id,
            )
        return Response(s.EngineSerializer(locked).data)

    @extend_schema(responses={200: s.ResidencySerializer(many=True)})
    @action(detail=True, methods=["get"])
    def residency(self, request, engine=None):
        obj = self.get_object()
        qs = Residency.objects.filter(engine=obj).select_related(
            "engine", "version__tenant", "version__adapter"
        )
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(s.ResidencySerializer(page, many=True).data)
