"""REST endpoints of budgets.

- GET|POST /tenants/{t}/budgets/ {scope, tokens, window, thresholds}: a tenant's budgets, each with
  where it stands this window (used, reserved, remaining, resets_at, forecast_exhausted_at).
- GET|PUT|PATCH|DELETE /tenants/{t}/budgets/{id}/.
- GET|PUT /price-cards/ {base_model, prompt_weight, completion_weight, price_per_million}: the
  token weights and prices per base model (platform admins).
Who may see and set what: adapters/access.py (may_view_budgets, require_budget_change,
require_price_card_change).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from budgets import selectors
from budgets import serializers as s
from budgets.models import Budget, PriceCard
from budgets.money import money_of_budgets
from budgets.services import budgets as service
from budgets.services.price_cards import price_card_set
from core.errors import ApplicationError, PermissionDenied
from tenants.api_base import PlatformViewSet, TenantScopedViewSet


def _object(request: Any) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise ApplicationError("invalid", "The body must be a JSON object.")
    return dict(request.data)


class BudgetViewSet(TenantScopedViewSet):
    schema_model = Budget
    serializer_class = s.BudgetSerializer
    lookup_url_kwarg = "budget"
    tenant_capabilities = {
        "list": "object",
        "retrieve": "object",
        "create": "object",
        "update": "object",
        "partial_update": "object",
        "destroy": "object",
    }  # adapters.access decides: members see, owners (and platform admins) set

    def get_queryset(self):
        return selectors.budgets_of(tenant=self.tenant)

    def _require_view(self) -> None:
        if not self.access.may_view_budgets(self.tenant):
            raise PermissionDenied(
                "permission.denied", f"Budgets of tenant '{self.tenant.slug}' are for its members."
            )

    @staticmethod
    def _context(budgets: list[Budget]) -> dict[str, Any]:
        statuses = selectors.statuses_of(budgets)
        return {"statuses": statuses, "money": money_of_budgets(budgets, statuses)}

    def _answer(self, budget: Budget, code: int = status.HTTP_200_OK) -> Response:
        context = self._context([budget])
        return Response(s.BudgetSerializer(budget, context=context).data, status=code)

    def list(self, request: Any, tenant: str) -> Response:
        self._require_view()
        page = list(self.paginate_queryset(self.get_queryset()) or [])
        return self.get_paginated_response(
            s.BudgetSerializer(page, many=True, context=self._context(page)).data
        )

    def retrieve(self, request: Any, tenant: str, budget: str) -> Response:
        self._require_view()
        return self._answer(selectors.budget_get(tenant=self.tenant, budget_id=budget))

    @extend_schema(request=s.BudgetInputSerializer, responses={201: s.BudgetSerializer})
    def create(self, request: Any, tenant: str) -> Response:
        data = _object(request)
        created = service.budget_create(
            access=self.access,
            tenant=self.tenant,
            scope=data.get("scope"),
            tokens=data.get("tokens"),
            window=data.get("window", "month"),
            thresholds=data.get("thresholds"),
            request_id=self.request_id,
        )
        return self._answer(created, status.HTTP_201_CREATED)

    def _change(self, request: Any, budget_id: str, *, whole: bool) -> Response:
        data = _object(request)
        self.access.require_budget_change(self.tenant)  # before the lookup tells anything
        budget = selectors.budget_get(tenant=self.tenant, budget_id=budget_id)
        if whole:
            missing = {"scope", "tokens", "window"} - set(data)
            if missing:
                raise ApplicationError(
                    "budget.missing_field",
                    f"PUT sets the whole budget: missing {', '.join(sorted(missing))}.",
                )
        changed = service.budget_update(
            access=self.access, budget=budget, changes=data, request_id=self.request_id
        )
        return self._answer(changed)

    @extend_schema(request=s.BudgetInputSerializer, responses={200: s.BudgetSerializer})
    def update(self, request: Any, tenant: str, budget: str) -> Response:
        return self._change(request, budget, whole=True)

    @extend_schema(request=s.BudgetInputSerializer, responses={200: s.BudgetSerializer})
    def partial_update(self, request: Any, tenant: str, budget: str) -> Response:
        return self._change(request, budget, whole=False)

    def destroy(self, request: Any, tenant: str, budget: str) -> Response:
        self.access.require_budget_change(self.tenant)
        found = selectors.budget_get(tenant=self.tenant, budget_id=budget)
        service.budget_delete(access=self.access, budget=found, request_id=self.request_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class PriceCardViewSet(PlatformViewSet):
    schema_model = PriceCard
    serializer_class = s.PriceCardSerializer
    pagination_class = None
    action_scopes = {"update_card": "admin"}
    # update_card: the service decides (price_card.not_allowed)
    platform_roles: dict[str, tuple[str, ...]] = {"list": ("is_platform_admin",), "update_card": ()}

    def get_queryset(self):
        return selectors.price_cards()

    @extend_schema(responses={200: s.PriceCardSerializer(many=True)})
    def list(self, request: Any) -> Response:
        return Response(s.PriceCardSerializer(selectors.price_cards(), many=True).data)

    @extend_schema(request=s.PriceCardSerializer, responses={200: s.PriceCardSerializer})
    def update_card(self, request: Any) -> Response:
        data = _object(request)
        card = price_card_set(
            access=self.access,
            base_model=str(data.get("base_model") or ""),
            values=data,
            request_id=self.request_id,
        )
        return Response(s.PriceCardSerializer(card).data)
