"""REST endpoints of release plans, under an alias.

- GET|POST /tenants/{t}/aliases/{a}/releases/: the alias's plans (newest first), or start one
  (`{candidate: "support@2", steps: [5, 25, 50, 100], min_step_seconds?, min_step_samples?,
  sample_share?, alpha?, margin?}`; 201).
- GET .../releases/{id}/: one plan with each step's samples and guards (estimate, interval,
  decision) and every decision with its figures.
- POST .../releases/{id}/pause/ | resume/ | advance/ | rollback/ (`{reason?}`): a person's action.
- GET .../releases/{id}/samples/: the sampled prompts and answers a plan that keeps text kept,
  with their verdicts (the tenant's eval reviewers: `manage_evals`).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response

from adapters import selectors as registry
from adapters.models import Alias
from core.api.parsers import JsonObjectParser
from core.errors import NotFound
from evals import selectors
from evals import serializers as s
from evals.models import ReleasePlan
from evals.services import release_plans
from tenants.api_base import TenantScopedViewSet

ACTIONS = {
    "pause": release_plans.plan_pause,
    "resume": release_plans.plan_resume,
    "advance": release_plans.plan_advance,
    "rollback": release_plans.plan_rollback,
}


class ReleasePlanViewSet(TenantScopedViewSet):
    schema_model = ReleasePlan
    serializer_class = s.ReleasePlanSerializer
    parser_classes = [JsonObjectParser]
    lookup_url_kwarg = "plan"
    lookup_value_regex = r"[0-9]{1,9}"
    tenant_capabilities = {
        "list": "view",
        "retrieve": "view",
        "create": "manage_aliases",
        **{name: "manage_aliases" for name in ACTIONS},
        "samples": "manage_evals",
    }
    alias: Alias

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        name = self.kwargs["alias"]
        found = registry.aliases_for(tenant=self.tenant).filter(name=name).first()
        if found is None:
            raise NotFound("alias.not_found", f"Tenant '{self.tenant.slug}' has no alias '{name}'.")
        self.alias = found

    def get_queryset(self):
        return selectors.release_plans_of(alias=self.alias)

    def _out(self, plan_id: int, code: int = status.HTTP_200_OK) -> Response:
        plan = selectors.release_plan_get(alias=self.alias, plan_id=plan_id)
        return Response(s.ReleasePlanSerializer(plan).data, status=code)

    def list(self, request: Any, tenant: str, alias: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.ReleasePlanSerializer(page, many=True).data)

    def retrieve(self, request: Any, tenant: str, alias: str, plan: str) -> Response:
        return self._out(int(plan))

    @extend_schema(request=s.ReleasePlanWriteSerializer, responses={201: s.ReleasePlanSerializer})
    def create(self, request: Any, tenant: str, alias: str) -> Response:
        data = s.ReleasePlanWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        started = release_plans.plan_start(
            access=self.access, alias=self.alias, request_id=self.request_id, **data.validated_data
        )
        return self._out(started.pk, status.HTTP_201_CREATED)

    def _act(self, name: str, plan: str) -> Response:
        data = s.ReleaseActionSerializer(data=self.request.data)
        data.is_valid(raise_exception=True)
        found = selectors.release_plan_get(alias=self.alias, plan_id=int(plan))
        ACTIONS[name](
            access=self.access,
            plan=found,
            reason=data.validated_data["reason"],
            request_id=self.request_id,
        )
        return self._out(found.pk)

    @extend_schema(responses={200: s.ReleaseSampleSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def samples(self, request: Any, tenant: str, alias: str, plan: str) -> Response:
        """The kept sampled prompts and answers (none for a plan that keeps counts only)."""
        found = selectors.release_plan_get(alias=self.alias, plan_id=int(plan))
        page = self.paginate_queryset(selectors.release_samples_of(plan=found))
        return self.get_paginated_response(s.ReleaseSampleSerializer(page, many=True).data)

    @extend_schema(request=s.ReleaseActionSerializer, responses={200: s.ReleasePlanSerializer})
    @action(detail=True, methods=["post"])
    def pause(self, request: Any, tenant: str, alias: str, plan: str) -> Response:
        """Stop the controller acting on the plan (its weights stay as they are)."""
        return self._act("pause", plan)

    @extend_schema(request=s.ReleaseActionSerializer, responses={200: s.ReleasePlanSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request: Any, tenant: str, alias: str, plan: str) -> Response:
        return self._act("resume", plan)

    @extend_schema(request=s.ReleaseActionSerializer, responses={200: s.ReleasePlanSerializer})
    @action(detail=True, methods=["post"])
    def advance(self, request: Any, tenant: str, alias: str, plan: str) -> Response:
        """Move to the next step now, whatever the guards say (recorded with their figures)."""
        return self._act("advance", plan)

    @extend_schema(request=s.ReleaseActionSerializer, responses={200: s.ReleasePlanSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request: Any, tenant: str, alias: str, plan: str) -> Response:
        """End the plan with the stable version alone at 100 %."""
        return self._act("rollback", plan)
