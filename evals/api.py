"""REST endpoints of the eval gate.

- POST|GET /tenants/{t}/eval-suites/ (multipart `name`, `file`): upload a suite version, list
  suites with their versions.
- GET|PUT /tenants/{t}/adapters/{a}/eval-policy/: what the adapter's versions must meet.
- POST .../versions/{n}/eval-runs/ (start a run on the policy's suite: 201, or 200 with the run
  already queued or running), GET .../versions/{n}/eval-runs/, GET .../eval-runs/{id}/ (with the summary and the gate's
  verdict now), GET .../eval-runs/{id}/cases/?format=json|jsonl.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from adapters import selectors as registry
from adapters.models import Adapter, AdapterVersion
from core.api.formats import FormattedActions, JsonLinesRenderer
from core.api.parsers import JsonObjectParser
from core.errors import ApplicationError
from evals import selectors
from evals import serializers as s
from evals.models import EvalPolicy, EvalRun, EvalSuite
from evals.services import policies, runner, suites
from tenants.api_base import TenantScopedViewSet


class SuiteViewSet(TenantScopedViewSet):
    schema_model = EvalSuite
    serializer_class = s.SuiteSerializer
    parser_classes = [MultiPartParser, FormParser]
    tenant_capabilities = {"list": "view", "create": "object"}  # create: suite_upload checks

    def get_queryset(self):
        return selectors.suites_of(tenant=self.tenant)

    def list(self, request: Any, tenant: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.SuiteSerializer(page, many=True).data)

    @extend_schema(
        request={"multipart/form-data": s.SuiteUploadSerializer},
        responses={201: s.SuiteSerializer, 200: s.SuiteSerializer},
    )
    def create(self, request: Any, tenant: str) -> Response:
        """A new suite version (201), or the version already holding these bytes (200)."""
        data = s.SuiteUploadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        limit = self.tenant.eval_max_suite_bytes
        raw = upload.read(limit + 1)  # one byte more than the plan: enough to refuse it
        version, created = suites.suite_upload(
            access=self.access,
            tenant=self.tenant,
            name=data.validated_data["name"],
            raw=raw,
            request_id=self.request_id,
        )
        suite = selectors.suites_of(tenant=self.tenant).get(pk=version.suite_id)
        return Response(
            s.SuiteSerializer(suite).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class _AdapterScoped(TenantScopedViewSet):
    """Under /tenants/{t}/adapters/{a}/: the adapter must be visible (else 404)."""

    adapter: Adapter

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.adapter = registry.adapter_get(
            access=self.access, tenant=self.tenant, name=self.kwargs["adapter"]
        )


class PolicyViewSet(_AdapterScoped):
    schema_model = EvalPolicy
    serializer_class = s.PolicySerializer
    parser_classes = [JsonObjectParser]
    pagination_class = None
    tenant_capabilities = {"retrieve": "object", "update": "object"}  # policy_set checks owners

    @extend_schema(responses={200: s.PolicySerializer})
    def retrieve(self, request: Any, tenant: str, adapter: str) -> Response:
        return Response(s.PolicySerializer(selectors.policy_get(adapter=self.adapter)).data)

    @extend_schema(request=s.PolicyWriteSerializer, responses={200: s.PolicySerializer})
    def update(self, request: Any, tenant: str, adapter: str) -> Response:
        data = s.PolicyWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        policy = policies.policy_set(
            access=self.access,
            adapter=self.adapter,
            request_id=self.request_id,
            **data.validated_data,
        )
        return Response(s.PolicySerializer(policy).data)


class RunViewSet(FormattedActions, _AdapterScoped):
    schema_model = EvalRun
    serializer_class = s.RunSerializer
    renderer_classes = [JSONRenderer, JsonLinesRenderer]
    formatted_actions = ("cases",)
    lookup_url_kwarg = "run"
    lookup_value_regex = r"[0-9]{1,9}"
    tenant_capabilities = {
        "list": "object",
        "create": "object",  # runner.run_request checks
        "retrieve": "object",
        "cases": "object",
    }
    version: AdapterVersion

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.version = registry.version_get(adapter=self.adapter, number=int(self.kwargs["number"]))

    def get_queryset(self):
        return selectors.runs_of(version=self.version)

    def list(self, request: Any, tenant: str, adapter: str, number: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.RunSerializer(page, many=True).data)

    @extend_schema(request=None, responses={201: s.RunSerializer, 200: s.RunSerializer})
    def create(self, request: Any, tenant: str, adapter: str, number: str) -> Response:
        """Evaluate the version now on its adapter's policy suite."""
        run, created = runner.run_request(access=self.access, version=self.version)
        return Response(
            s.RunSerializer(run).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def retrieve(self, request: Any, tenant: str, adapter: str, number: str, run: str) -> Response:
        """The run, its summary per scorer for both sides, and the gate's verdict on it now."""
        found = selectors.run_get(version=self.version, number=int(run))
        body = s.RunSerializer(found).data
        body["summary"] = selectors.run_summary_dict(found)
        policy = selectors.policy_of(self.adapter)
        body["gate"] = (
            selectors.gate_verdict(version=self.version, policy=policy)
            if policy is not None and policy.suite_version_id == found.suite_version_id
            else None
        )
        return Response(body)

    @extend_schema(
        parameters=[
            OpenApiParameter("format", str, enum=["json", "jsonl"]),
            OpenApiParameter("tag", str, description="only the cases with this tag"),
        ],
        responses={200: OpenApiTypes.OBJECT, (200, "application/x-ndjson"): OpenApiTypes.STR},
    )
    def cases(
        self, request: Any, tenant: str, adapter: str, number: str, run: str
    ) -> Response | HttpResponse:
        """Every case side by side (candidate | serving now), in file order."""
        found = selectors.run_get(version=self.version, number=int(run))
        rows = selectors.case_rows(found)
        tag = request.query_params.get("tag")
        if tag:
            rows = [row for row in rows if tag in row["tags"]]
        fmt = request.query_params.get("format", "json")
        if fmt == "jsonl":
            body = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
            response = HttpResponse(body, content_type=JsonLinesRenderer.media_type)
            name = f"eval-{self.tenant.slug}-{adapter}-{number}-run{found.number}.jsonl"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
            return response
        if fmt != "json":
            raise ApplicationError("eval_run.bad_format", "format is json or jsonl.")
        return Response({"run": found.number, "cases": rows})

    def perform_content_negotiation(self, request: Any, force: bool = False) -> Any:
        # An unknown ?format= is the handler's clear 400, not DRF's bare 404.
        return super().perform_content_negotiation(request, force=True)
