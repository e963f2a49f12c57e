"""REST endpoints for raising a budget.

GET|POST /api/v1/tenants/{t}/budgets/{id}/raise-requests/   members read; owners ask
         {tokens, duration: window|permanent, reason}
GET      /api/v1/budget-raise-requests/?status=pending       platform admins: every tenant's
GET      /api/v1/budget-raise-requests/{id}/                 platform admins
POST     /api/v1/budget-raise-requests/{id}/approve/         platform admins, not the requester
POST     /api/v1/budget-raise-requests/{id}/reject/          {comment?}
Who may do what: adapters/access.py (require_budget_raise_request, require_budget_raise_decision).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from budgets import raises, selectors
from budgets.raise_models import BudgetRaiseRequest, RaiseStatus
from core.errors import ApplicationError, PermissionDenied
from tenants.api_base import PlatformViewSet, TenantScopedViewSet


class RaiseRequestSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    budget = serializers.IntegerField(source="budget_id", read_only=True)
    scope = serializers.CharField(source="budget.scope", read_only=True)
    window = serializers.CharField(source="budget.window", read_only=True)
    requested_by = serializers.CharField(
        source="requested_by.username", default=None, read_only=True
    )
    decided_by = serializers.CharField(source="decided_by.username", default=None, read_only=True)

    class Meta:
        model = BudgetRaiseRequest
        fields = [
            "id",
            "tenant",
            "budget",
            "scope",
            "window",
            "tokens",
            "previous_tokens",
            "duration",
            "reason",
            "status",
            "requested_by",
            "requested_at",
            "decided_by",
            "decided_at",
            "comment",
            "window_start",
            "window_end",
        ]
        read_only_fields = fields


class RaiseRequestInputSerializer(serializers.Serializer):
    tokens = serializers.IntegerField()
    duration = serializers.ChoiceField(choices=["window", "permanent"])
    reason = serializers.CharField(max_length=2000)


class DecisionSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True)


def _body(request: Any) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise ApplicationError("invalid", "The body must be a JSON object.")
    return dict(request.data)


class BudgetRaiseRequestViewSet(TenantScopedViewSet):
    """A budget's raise requests, under the tenant."""

    schema_model = BudgetRaiseRequest
    serializer_class = RaiseRequestSerializer
    tenant_capabilities = {"list": "object", "create": "object"}  # adapters.access decides

    def get_queryset(self):
        return BudgetRaiseRequest.objects.none()

    def list(self, request: Any, tenant: str, budget: str) -> Response:
        if not self.access.may_view_budgets(self.tenant):
            raise PermissionDenied(
                "permission.denied", f"Budgets of tenant '{self.tenant.slug}' are for its members."
            )
        found = selectors.budget_get(tenant=self.tenant, budget_id=budget)
        page = self.paginate_queryset(raises.raise_requests_of(budget=found))
        return self.get_paginated_response(RaiseRequestSerializer(page, many=True).data)

    @extend_schema(request=RaiseRequestInputSerializer, responses={201: RaiseRequestSerializer})
    def create(self, request: Any, tenant: str, budget: str) -> Response:
        data = _body(request)
        self.access.require_budget_raise_request(self.tenant)  # before the lookup tells anything
        found = selectors.budget_get(tenant=self.tenant, budget_id=budget)
        created = raises.raise_request_create(
            access=self.access,
            budget=found,
            tokens=data.get("tokens"),
            duration=data.get("duration"),
            reason=data.get("reason"),
            request_id=self.request_id,
        )
        return Response(RaiseRequestSerializer(created).data, status=status.HTTP_201_CREATED)


class BudgetRaiseDecisionViewSet(mixins.ListModelMixin, PlatformViewSet):
    """Every tenant's raise requests, for the platform admins who decide them."""

    schema_model = BudgetRaiseRequest
    serializer_class = RaiseRequestSerializer
    lookup_url_kwarg = "raise_request"
    lookup_value_regex = r"[0-9]{1,18}"
    platform_roles = {
        "list": ("is_platform_admin",),
        "retrieve": ("is_platform_admin",),
        "approve": ("is_platform_admin",),
        "reject": ("is_platform_admin",),
    }
    action_scopes = {"approve": "admin", "reject": "admin"}

    def get_queryset(self):
        qs = raises.raise_requests_visible(access=self.access)
        wanted = self.request.query_params.get("status")
        if wanted:
            if wanted not in RaiseStatus.values:
                raise ApplicationError(
                    "budget_raise.invalid_status",
                    f"status is one of {', '.join(RaiseStatus.values)}.",
                )
            qs = qs.filter(status=wanted)
        return qs

    def retrieve(self, request: Any, raise_request: str) -> Response:
        found = raises.raise_request_get(access=self.access, request_id=raise_request)
        return Response(RaiseRequestSerializer(found).data)

    def _decide(self, request: Any, raise_request: str, *, approve: bool) -> Response:
        data = DecisionSerializer(data=_body(request))
        data.is_valid(raise_exception=True)
        found = raises.raise_request_get(access=self.access, request_id=raise_request)
        decide = raises.raise_request_approve if approve else raises.raise_request_reject
        decided = decide(
            access=self.access,
            raise_request=found,
            comment=data.validated_data.get("comment", ""),
            request_id=self.request_id,
        )
        return Response(RaiseRequestSerializer(decided).data)

    @extend_schema(request=DecisionSerializer, responses={200: RaiseRequestSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Any, raise_request: str) -> Response:
        return self._decide(request, raise_request, approve=True)

    @extend_schema(request=DecisionSerializer, responses={200: RaiseRequestSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Any, raise_request: str) -> Response:
        return self._decide(request, raise_request, approve=False)
