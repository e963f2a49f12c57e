"""REST endpoints for base models, adapters, versions (upload and lifecycle) and aliases."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from adapters import selectors
from adapters import serializers as s
from adapters.approval_checks import ApprovalOverride
from adapters.fleet_port import fleet
from adapters.models import Adapter, AdapterVersion, Alias, BaseModel
from adapters.services import aliases, lifecycle, registry, releases, uploads
from core.api.parsers import JsonObjectParser
from core.errors import ApplicationError, NotFound
from tenants.api_base import PlatformViewSet, TenantScopedViewSet
from tenants.services.tenancy import adapter_grant, adapter_revoke_grants


class BaseModelViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    serializer_class = s.BaseModelSerializer
    queryset = BaseModel.objects.all()
    lookup_field = "name"
    platform_roles = {"list": (), "retrieve": (), "create": ("is_platform_admin",)}
    action_scopes = {"create": "admin"}

    @extend_schema(request=s.BaseModelCreateSerializer, responses={201: s.BaseModelSerializer})
    def create(self, request):
        data = s.BaseModelCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        base = registry.base_model_register(
            access=self.access, request_id=self.request_id, **data.validated_data
        )
        return Response(s.BaseModelSerializer(base).data, status=status.HTTP_201_CREATED)


class AdapterViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    schema_model = Adapter
    serializer_class = s.AdapterSerializer
    lookup_field = "name"
    lookup_url_kwarg = "adapter"
    tenant_capabilities = {
        # list is "object": the queryset is what the caller may see, so a per-adapter grantee
        # lists the adapters granted to them and nothing else.
        "list": "object",
        "retrieve": "object",
        "create": "create_adapter",
        "partial_update": "object",
        "grants": "object",
        "revoke_grants": "object",
    }
    # A grant lets someone outside the tenant in: tenant administration, never a write token's.
    action_scopes = {"grants": "admin", "revoke_grants": "admin"}
    filterset_fields = ["base_model__name", "slo_class"]

    def get_queryset(self):
        return selectors.adapters_for(access=self.access, tenant=self.tenant)

    def retrieve(self, request, tenant=None, adapter=None):
        obj = selectors.adapter_get(access=self.access, tenant=self.tenant, name=adapter)
        return Response(s.AdapterSerializer(obj).data)

    @extend_schema(request=s.AdapterSerializer, responses={201: s.AdapterSerializer})
    def create(self, request, tenant=None):
        data = s.AdapterSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        obj = registry.adapter_create(
            access=self.access,
            tenant=self.tenant,
            name=v.pop("name"),
            base_model=v.pop("base_model"),
            request_id=self.request_id,
            **v,
        )
        return Response(s.AdapterSerializer(obj).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.AdapterUpdateSerializer, responses={200: s.AdapterSerializer})
    def partial_update(self, request, tenant=None, adapter=None):
        obj = selectors.adapter_get(access=self.access, tenant=self.tenant, name=adapter)
        data = s.AdapterUpdateSerializer(obj, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        obj = registry.adapter_update(
            access=self.access, adapter=obj, request_id=self.request_id, **data.validated_data
        )
        return Response(s.AdapterSerializer(obj).data)

    @extend_schema(request=s.GrantSerializer, responses={200: s.GrantSerializer})
    @action(detail=True, methods=["post"])
    def grants(self, request, tenant=None, adapter=None):
        """Give one user rights on this adapter only (owners)."""
        obj = selectors.adapter_get(access=self.access, tenant=self.tenant, name=adapter)
        data = s.GrantSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        perms = adapter_grant(
            access=self.access, adapter=obj, request_id=self.request_id, **data.validated_data
        )
        return Response({"username": data.validated_data["username"], "perms": perms})

    @action(detail=True, methods=["delete"], url_path=r"grants/(?P<username>[\w.@+-]+)")
    def revoke_grants(self, request, tenant=None, adapter=None, username=None):
        obj = selectors.adapter_get(access=self.access, tenant=self.tenant, name=adapter)
        adapter_revoke_grants(
            access=self.access, adapter=obj, username=username, request_id=self.request_id
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class VersionViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    schema_model = AdapterVersion
    serializer_class = s.VersionSerializer
    lookup_field = "number"
    lookup_url_kwarg = "number"
    lookup_value_regex = r"[0-9]{1,9}"
    parser_classes = [MultiPartParser, FormParser, JsonObjectParser]
    tenant_capabilities = {
        "list": "object",
        "retrieve": "object",
        "create": "object",
        "approve": "object",
        "reject": "object",
        "release": "object",
        "disable": "object",
        "residency": "object",
    }
    action_scopes = {"approve": "approve", "reject": "approve", "release": "approve"}
    filterset_fields = ["status"]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.adapter = selectors.adapter_get(
            access=self.access, tenant=self.tenant, name=self.kwargs["adapter"]
        )

    def get_queryset(self):
        return selectors.versions_of(adapter=self.adapter).defer(*selectors.VERSION_LIST_DEFERRED)

    def _version(self, number):
        return selectors.version_get(adapter=self.adapter, number=int(number))

    def _detail(self, version, code=status.HTTP_200_OK):
        fresh = selectors.version_get(adapter=self.adapter, number=version.number)
        return Response(s.VersionDetailSerializer(fresh).data, status=code)

    @extend_schema(responses={200: s.VersionDetailSerializer})
    def retrieve(self, request, tenant=None, adapter=None, number=None):
        return Response(s.VersionDetailSerializer(self._version(number)).data)

    @extend_schema(
        request={"multipart/form-data": s.VersionUploadSerializer},
        responses={201: s.VersionDetailSerializer},
    )
    def create(self, request, tenant=None, adapter=None):
        # Before request.data: a body that cannot fit is refused before it is parsed and spooled.
        uploads.upload_precheck(
            access=self.access, adapter=self.adapter, content_length=_content_length(request)
        )
        try:
            data = s.VersionUploadSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            files = data.validated_data
            signature = files.get("signature")
            version = uploads.version_upload(
                access=self.access,
                adapter=self.adapter,
                config=uploads.IncomingFile(files["adapter_config"], files["adapter_config"].size),
                model=uploads.IncomingFile(files["adapter_model"], files["adapter_model"].size),
                signature=signature.read(uploads.MAX_SIGNATURE_BYTES + 1) if signature else None,
                request_id=self.request_id,
            )
        finally:
            # Django deletes upload temp files when the request is closed, which under ASGI is
            # after the response has been sent; close them now, so none outlives the answer.
            for uploaded in request.FILES.values():
                uploaded.close()
        return self._detail(version, status.HTTP_201_CREATED)

    @extend_schema(request=s.CommentSerializer, responses={200: s.VersionDetailSerializer})
    @extend_schema(responses={200: s.PlacementSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def residency(self, request, tenant=None, adapter=None, number=None):
        """Where this version is: tier, desired and observed state on each engine of its pool."""
        placement = fleet().version_placement(self._version(number))
        return Response(s.PlacementSerializer(placement, many=True).data)

    @extend_schema(request=s.ApproveSerializer, responses={200: s.VersionDetailSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request, tenant=None, adapter=None, number=None):
        """Approve; `{"override_eval_gate": true, "reason": ...}` approves despite a failed eval
        gate (a second reviewer, evals.services.gate)."""
        data = s.ApproveSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        given = data.validated_data
        version = lifecycle.version_approve(
            version=self._version(number),
            comment=given["comment"],
            access=self.access,
            request_id=self.request_id,
            override=ApprovalOverride(given["reason"]) if given["override_eval_gate"] else None,
        )
        return self._detail(version)

    @extend_schema(request=s.ReasonSerializer, responses={200: s.VersionDetailSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request, tenant=None, adapter=None, number=None):
        reason = request.data.get("reason", "") if hasattr(request.data, "get") else ""
        version = lifecycle.version_reject(
            version=self._version(number),
            reason=str(reason),
            access=self.access,
            request_id=self.request_id,
        )
        return self._detail(version)

    @extend_schema(request=s.CommentSerializer, responses={200: s.VersionDetailSerializer})
    @action(detail=True, methods=["post"])
    def release(self, request, tenant=None, adapter=None, number=None):
        data = s.CommentSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        version = lifecycle.version_release(
            version=self._version(number),
            comment=data.validated_data["comment"],
            access=self.access,
            request_id=self.request_id,
        )
        return self._detail(version)

    @extend_schema(request=s.CommentSerializer, responses={200: s.VersionDetailSerializer})
    @action(detail=True, methods=["post"])
    def disable(self, request, tenant=None, adapter=None, number=None):
        reason = request.data.get("reason", "") if hasattr(request.data, "get") else ""
        version = lifecycle.version_disable(
            version=self._version(number),
            reason=str(reason),
            access=self.access,
            request_id=self.request_id,
        )
        return self._detail(version)


def _content_length(request) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0) or None
    except ValueError:
        return None


class VersionQueueViewSet(mixins.ListModelMixin, PlatformViewSet):
    """Versions across every visible tenant: `?status=validated` is the reviewer queue."""

    schema_model = AdapterVersion
    serializer_class = s.VersionSerializer
    platform_roles = {"list": ()}
    filterset_fields = ["status"]

    def get_queryset(self):
        qs = selectors.versions_visible(access=self.access).defer(*selectors.VERSION_LIST_DEFERRED)
        tenant = self.request.query_params.get("tenant")
        return qs.filter(tenant__slug=tenant) if tenant else qs


class AliasViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    schema_model = Alias
    serializer_class = s.AliasSerializer
    lookup_field = "name"
    lookup_url_kwarg = "alias"
    tenant_capabilities = {
        "list": "view",
        "retrieve": "view",
        "create": "manage_aliases",
        "update": "manage_aliases",
        "destroy": "manage_aliases",
        "promote": "manage_aliases",
        "rollback": "manage_aliases",
        "revisions": "view",
    }

    def get_queryset(self):
        return selectors.aliases_for(tenant=self.tenant)

    def _get(self, name):
        alias = self.get_queryset().filter(name=name).first()
        if alias is None:
            raise NotFound("alias.not_found", f"Tenant '{self.tenant.slug}' has no alias '{name}'.")
        return alias

    def _out(self, name, code=status.HTTP_200_OK):
        return Response(s.AliasSerializer(self._get(name)).data, status=code)

    def retrieve(self, request, tenant=None, alias=None):
        return Response(s.AliasSerializer(self._get(alias)).data)

    @extend_schema(request=s.AliasWriteSerializer, responses={201: s.AliasSerializer})
    def create(self, request, tenant=None):
        data = s.AliasWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        name = data.validated_data.get("name")
        if not name:
            raise ApplicationError("alias.name_required", "Give the alias a name.")
        if self.get_queryset().filter(name=name).exists():
            raise ApplicationError(
                "alias.exists",
                f"Alias '{name}' exists; PUT /aliases/{name}/ to change it.",
                status=409,
            )
        aliases.alias_set(
            access=self.access,
            tenant=self.tenant,
            name=name,
            targets=data.validated_data["targets"],
            guard=data.validated_data.get("guard"),
            reason=data.validated_data["reason"],
            request_id=self.request_id,
        )
        return self._out(name, status.HTTP_201_CREATED)

    @extend_schema(request=s.AliasWriteSerializer, responses={200: s.AliasSerializer})
    def update(self, request, tenant=None, alias=None):
        self._get(alias)
        data = s.AliasWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        aliases.alias_set(
            access=self.access,
            tenant=self.tenant,
            name=alias,
            targets=data.validated_data["targets"],
            guard=data.validated_data.get("guard"),
            reason=data.validated_data["reason"],
            request_id=self.request_id,
        )
        return self._out(alias)

    def destroy(self, request, tenant=None, alias=None):
        aliases.alias_delete(access=self.access, alias=self._get(alias), request_id=self.request_id)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=s.AliasPromoteSerializer, responses={200: s.AliasSerializer})
    @action(detail=True, methods=["post"])
    def promote(self, request, tenant=None, alias=None):
        """Send 100% of the alias to one active version (`{"version": "support@4"}`)."""
        found = self._get(alias)
        data = s.AliasPromoteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        releases.alias_promote(
            access=self.access, alias=found, request_id=self.request_id, **data.validated_data
        )
        return self._out(alias)

    @extend_schema(request=s.AliasRollbackSerializer, responses={200: s.AliasSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request, tenant=None, alias=None):
        """Return the alias to the targets it had before its current revision."""
        found = self._get(alias)
        data = s.AliasRollbackSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        releases.alias_rollback(
            access=self.access, alias=found, request_id=self.request_id, **data.validated_data
        )
        return self._out(alias)

    @extend_schema(responses={200: s.AliasRevisionSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def revisions(self, request, tenant=None, alias=None):
        """Every state of the alias's targets, newest first."""
        found = self._get(alias)
        page = self.paginate_queryset(releases.revisions_of(alias=found))
        return self.get_paginated_response(s.AliasRevisionSerializer(page, many=True).data)
