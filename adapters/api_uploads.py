"""REST endpoints for direct-to-S3 uploads: start (presigned part URLs), complete, abort.

POST   /api/v1/tenants/{t}/adapters/{a}/uploads/                 {model_size, config | adapter_config, part_size?}
GET    /api/v1/tenants/{t}/adapters/{a}/uploads/                 pending uploads (yours; owners: all)
GET    /api/v1/tenants/{t}/adapters/{a}/uploads/{id}/            fresh part URLs, to resume
POST   /api/v1/tenants/{t}/adapters/{a}/uploads/{id}/complete/   {parts: [{part_number, etag}], signature?, sha256?}
DELETE /api/v1/tenants/{t}/adapters/{a}/uploads/{id}/            abort
"""

from __future__ import annotations

import io

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from adapters import selectors
from adapters import serializers as s
from adapters.models import DirectUpload
from adapters.services import direct_uploads as service
from adapters.services.uploads import IncomingFile
from adapters.storage import CompletedPart, get_storage
from core.api.parsers import JsonObjectParser
from tenants.api_base import TenantScopedViewSet


class DirectUploadViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    schema_model = DirectUpload
    serializer_class = s.DirectUploadSerializer
    lookup_field = "public_id"
    lookup_url_kwarg = "upload"
    lookup_value_regex = r"[0-9a-f]{32}"
    parser_classes = [JsonObjectParser, MultiPartParser, FormParser]
    # Rights are per adapter (upload_version), checked by the services.
    tenant_capabilities = {
        "list": "object",
        "create": "object",
        "retrieve": "object",
        "destroy": "object",
        "complete": "object",
    }
    action_scopes = {"retrieve": "write"}  # its answer carries fresh upload URLs

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.adapter = selectors.adapter_get(
            access=self.access, tenant=self.tenant, name=self.kwargs["adapter"]
        )
        self.access.require_adapter(self.adapter, "upload_version")

    def get_queryset(self):
        return service.pending_uploads(access=self.access, adapter=self.adapter)

    def _upload(self, public_id):
        return service.pending_upload_get(
            access=self.access, adapter=self.adapter, public_id=public_id
        )

    def _detail(self, upload, parts, code=status.HTTP_200_OK):
        body = s.DirectUploadSerializer(upload).data
        body["parts"] = s.PartUrlSerializer(parts, many=True).data
        return Response(body, status=code)

    @extend_schema(
        request=s.DirectUploadStartSerializer, responses={201: s.DirectUploadDetailSerializer}
    )
    def create(self, request, tenant=None, adapter=None):
        data = s.DirectUploadStartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        if "config" in v:
            raw = v["config"].encode()
            config = IncomingFile(io.BytesIO(raw), len(raw))
        else:
            config = IncomingFile(v["adapter_config"], v["adapter_config"].size)
        upload, parts = service.direct_upload_start(
            access=self.access,
            adapter=self.adapter,
            model_size=v["model_size"],
            config=config,
            part_size=v.get("part_size"),
            request_id=self.request_id,
        )
        return self._detail(upload, parts, status.HTTP_201_CREATED)

    @extend_schema(responses={200: s.DirectUploadDetailSerializer})
    def retrieve(self, request, tenant=None, adapter=None, upload=None):
        found = self._upload(upload)
        return self._detail(found, service.part_urls(get_storage(), found))

    @extend_schema(
        request=s.DirectUploadCompleteSerializer, responses={201: s.VersionDetailSerializer}
    )
    @action(detail=True, methods=["post"])
    def complete(self, request, tenant=None, adapter=None, upload=None):
        found = self._upload(upload)
        data = s.DirectUploadCompleteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        version = service.direct_upload_complete(
            access=self.access,
            upload=found,
            parts=[CompletedPart(p["part_number"], p["etag"]) for p in v["parts"]],
            signature=v["signature"].encode() if v.get("signature") else None,
            sha256=v.get("sha256"),
            request_id=self.request_id,
        )
        fresh = selectors.version_get(adapter=self.adapter, number=version.number)
        return Response(s.VersionDetailSerializer(fresh).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, tenant=None, adapter=None, upload=None):
        service.direct_upload_abort(
            access=self.access, upload=self._upload(upload), request_id=self.request_id
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
