"""/api/v1/sso/providers/: the configured providers, their mappings, and the dry run."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.errors import NotFound
from tenants.api_base import PlatformViewSet
from tenants.sso.models import SsoMapping
from tenants.sso.providers import configured_providers, provider_named
from tenants.sso.services.mappings import (
    mapping_create,
    mapping_delete,
    mapping_describe,
    mapping_dry_run,
)

ADMIN = ("is_platform_admin",)


class MappingSerializer(serializers.Serializer):
    claim = serializers.CharField(max_length=100)
    value = serializers.CharField(max_length=255)
    tenant = serializers.CharField(required=False, allow_blank=True, default="")
    role = serializers.CharField(required=False, allow_blank=True, default="")
    platform_role = serializers.CharField(required=False, allow_blank=True, default="")


class DryRunSerializer(serializers.Serializer):
    claims = serializers.JSONField()


# `label` cannot be a declared field (every serializer field has a `label` of its own).
PROVIDERS = inline_serializer(
    name="SsoProvider",
    fields={
        "name": serializers.CharField(),
        "label": serializers.CharField(),
        "issuer": serializers.CharField(),
    },
    many=True,
)


class SsoProviderViewSet(PlatformViewSet):
    """Providers come from settings (OIDC_PROVIDERS); platform admins keep their mappings."""

    queryset = SsoMapping.objects.none()  # for the schema; the actions read their own rows
    lookup_field = "name"
    lookup_value_regex = r"[a-zA-Z0-9-]+"
    platform_roles = {
        "list": ADMIN,
        "mappings": ADMIN,
        "add_mapping": ADMIN,
        "mapping_detail": ADMIN,
        "dry_run": ADMIN,
    }
    action_scopes = {"add_mapping": "admin", "mapping_detail": "admin", "dry_run": "admin"}

    @extend_schema(responses={200: PROVIDERS})
    def list(self, request):
        return Response(
            [{"name": p.name, "label": p.label, "issuer": p.issuer} for p in configured_providers()]
        )

    @extend_schema(responses={200: MappingSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def mappings(self, request, name=None):
        """The provider's mappings."""
        provider = provider_named(name or "")
        rows = SsoMapping.objects.filter(provider=provider.name).select_related("tenant")
        return Response([mapping_describe(m) for m in rows])

    @extend_schema(request=MappingSerializer, responses={201: MappingSerializer})
    @mappings.mapping.post
    def add_mapping(self, request, name=None):
        """Add a mapping: `claim`, `value`, and `tenant` + `role` or `platform_role`."""
        provider = provider_named(name or "")
        data = MappingSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        mapping = mapping_create(
            access=self.access,
            provider=provider.name,
            request_id=self.request_id,
            **data.validated_data,
        )
        return Response(mapping_describe(mapping), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["delete"], url_path=r"mappings/(?P<mapping>\d+)")
    def mapping_detail(self, request, name=None, mapping=None):
        provider = provider_named(name or "")
        found = SsoMapping.objects.filter(provider=provider.name, pk=mapping).first()
        if found is None:
            raise NotFound("sso.mapping_not_found", "No such mapping at this provider.")
        mapping_delete(access=self.access, mapping=found, request_id=self.request_id)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=DryRunSerializer, responses={200: None})
    @action(detail=True, methods=["post"], url_path="dry-run")
    def dry_run(self, request, name=None):
        """The memberships `claims` would give, and what would change for the person whose
        `sub` they carry. Saves nothing."""
        data = DryRunSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(
            mapping_dry_run(
                access=self.access, provider=name or "", claims=data.validated_data["claims"]
            )
        )
